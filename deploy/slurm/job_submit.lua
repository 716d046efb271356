-- CODA: hold every new job until CODA's controller has placed it.
--
-- Installed next to slurm.conf with `JobSubmitPlugins=lua`. A held job has
-- priority 0, so Slurm's own scheduler leaves it alone; "coda:held" in its
-- AdminComment tells CODA's controller the job is its to place, and why it still
-- waits (`coda:held,wait=<reason>`: squeue -O JobID,UserName,StateCompact,Reason,admin_comment).
-- Its user may release it (`scontrol release`): that opts the job out of CODA, and
-- Slurm's own scheduler places it with what it asked for (CODA's controller marks it
-- `coda:passed,why=released`); its user may change it while it is held (CODA reads
-- the new request); scancel is Slurm's as always. What a user may not do is change
-- the nodes or CPUs of a job CODA has placed (it would undo the placement):
-- slurm_job_modify refuses, the user sees "Unspecified error", slurmctld's log says
-- why (Slurm 22.05 cannot pass a message to the user from job_modify). A job
-- submitted with --hold is left to its user: it is not marked, and when the user
-- releases it Slurm's own scheduler places it (the node agent still watches it).
-- To hand every job back to Slurm, see the operator guide (docs/operator.md).

local HELD = "coda:held"

function slurm_job_submit(job_desc, part_list, submit_uid)
   if job_desc.priority == 0 then
      return slurm.SUCCESS -- the user's own hold
   end
   job_desc.admin_comment = HELD
   job_desc.priority = 0
   return slurm.SUCCESS
end

-- Fields a user may not change on a job CODA has placed (it would undo the placement).
local PLACEMENT = { "min_cpus", "pn_min_cpus", "cpus_per_task", "min_nodes", "max_nodes" }

local function is_set(v)
   return v ~= nil and v ~= slurm.NO_VAL and v ~= slurm.NO_VAL16 and v ~= slurm.NO_VAL64
end

local function changes_placement(d)
   if d.req_nodes ~= nil or d.exc_nodes ~= nil then
      return true
   end
   for _, k in ipairs(PLACEMENT) do
      if is_set(d[k]) then
         return true
      end
   end
   return false
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   if modify_uid == 0 then
      return slurm.SUCCESS -- root: CODA's controller, or an admin
   end
   local mark = job_rec.admin_comment or ""
   if (mark:sub(1, 12) == "coda:placing" or mark:sub(1, 11) == "coda:placed")
      and changes_placement(job_desc) then
      slurm.log_info("CODA: job %u: a user change of its nodes or CPUs was refused",
                     job_rec.job_id)
      return slurm.ERROR
   end
   return slurm.SUCCESS
end

slurm.log_info("CODA job_submit.lua loaded")
return slurm.SUCCESS
