-- CODA: hold every new job until CODA's controller has placed it.
--
-- Installed next to slurm.conf with `JobSubmitPlugins=lua`. A held job has
-- priority 0, so Slurm's own scheduler leaves it alone; "coda:held" in its
-- AdminComment tells CODA's controller the job is its to place. Users cannot
-- release such a job themselves (slurm_job_modify refuses), so no job starts past
-- CODA. A job submitted with --hold is left to its user: it is not marked, and
-- when the user releases it Slurm's own scheduler places it (the node agent still
-- watches it). To hand every job back to Slurm, see README, "Operator guide".

local HELD = "coda:held"

function slurm_job_submit(job_desc, part_list, submit_uid)
   if job_desc.priority == 0 then
      return slurm.SUCCESS -- the user's own hold
   end
   job_desc.admin_comment = HELD
   job_desc.priority = 0
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   if modify_uid == 0 or job_desc.priority == nil or job_desc.priority == slurm.NO_VAL then
      return slurm.SUCCESS
   end
   if (job_rec.admin_comment or "") == HELD then
      slurm.log_user("job %u waits for CODA to place it and cannot be released by hand",
                     job_rec.job_id)
      return slurm.ERROR
   end
   return slurm.SUCCESS
end

slurm.log_info("CODA job_submit.lua loaded")
return slurm.SUCCESS
