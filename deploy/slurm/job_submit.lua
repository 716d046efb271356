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
--
-- Fail-open: a job is held only while CODA's controller is alive. It reads
-- coda-slurm.conf in this script's own directory (LEASE=, FAIL_OPEN_S=); when the
-- lease file shows no beat for FAIL_OPEN_S seconds (the controller and every standby
-- gone), or cannot be read, a new job is not held: Slurm's own scheduler places it,
-- and its mark says `coda:passed,why=controller-down`. Without a configuration it
-- holds nothing and says so in slurmctld's log.

local HELD = "coda:held"
local DOWN = "coda:passed,why=controller-down"

local function here()
   local src = debug.getinfo(1, "S").source or ""
   if src:sub(1, 1) == "@" then
      local dir = src:sub(2):match("^(.*)/[^/]*$")
      if dir ~= nil and dir ~= "" then
         return dir
      end
   end
   return "/etc/slurm"
end

local CONF_PATH = here() .. "/coda-slurm.conf"

-- KEY=VALUE lines; '#' starts a comment line. Only the keys below are read.
local function read_conf(path)
   local conf = {}
   local f = io.open(path, "r")
   if f == nil then
      return nil
   end
   for line in f:lines() do
      local k, v = line:match("^([A-Z_]+)=(.*)$")
      if k ~= nil then
         conf[k] = v
      end
   end
   f:close()
   return conf
end

local CONF = read_conf(CONF_PATH) or {}
local LEASE = CONF.LEASE
local FAIL_OPEN_S = tonumber((CONF.FAIL_OPEN_S or "60"):match("^%d+$") or "")
if LEASE == nil or LEASE:sub(1, 1) ~= "/" or FAIL_OPEN_S == nil or FAIL_OPEN_S < 1 then
   slurm.log_error("CODA: %s has no LEASE=/absolute/path (or FAIL_OPEN_S is not a number " ..
                   "of seconds): no job is held for CODA (docs/operator.md)", CONF_PATH)
   LEASE = nil
end

local said = ""
local function say_once(msg)
   if msg ~= said then
      slurm.log_info("CODA: %s", msg)
      said = msg
   end
end

-- Whether a controller beat within FAIL_OPEN_S seconds (the lease's "beat=").
local function controller_alive()
   if LEASE == nil then
      return false
   end
   local f = io.open(LEASE, "r")
   if f == nil then
      say_once("lease " .. LEASE .. " cannot be read: new jobs are not held")
      return false
   end
   local line = f:read(512) or ""
   f:close()
   local beat = tonumber(line:match("^coda%-lease epoch=%d+ holder=%S+ beat=([0-9.]+) ttl=") or "")
   if beat == nil then
      say_once("lease " .. LEASE .. " is not a CODA lease: new jobs are not held")
      return false
   end
   if os.time() - beat > FAIL_OPEN_S then
      say_once(string.format("no controller beat for %d s: new jobs are not held",
                             math.floor(os.time() - beat)))
      return false
   end
   if beat - os.time() > FAIL_OPEN_S then -- a clock far ahead must not hold jobs for ever
      say_once("the lease's beat is in the future: new jobs are not held")
      return false
   end
   say_once("a controller is alive: new jobs are held for it")
   return true
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   if job_desc.priority == 0 then
      return slurm.SUCCESS -- the user's own hold
   end
   if not controller_alive() then
      job_desc.admin_comment = DOWN
      return slurm.SUCCESS
   end
   job_desc.admin_comment = HELD
   job_desc.priority = 0
   return slurm.SUCCESS
end

-- Fields a user may not change on a job CODA has placed (it would undo the placement,
-- or CODA's picture of its node): counts, then the strings of TRES requests.
local PLACEMENT = { "min_cpus", "max_cpus", "pn_min_cpus", "cpus_per_task", "min_nodes",
                    "max_nodes", "num_tasks", "ntasks_per_node", "ntasks_per_socket",
                    "ntasks_per_core", "ntasks_per_tres" }
local PLACEMENT_TRES = { "tres_per_node", "tres_per_task", "tres_per_socket",
                         "tres_per_job", "cpus_per_tres", "mem_per_tres" }

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
   for _, k in ipairs(PLACEMENT_TRES) do
      if d[k] ~= nil and d[k] ~= "" then
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
