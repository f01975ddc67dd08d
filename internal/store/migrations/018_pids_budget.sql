-- 018_pids_budget: the host's process table as a node's room.
--
-- sandboxes.host_pids is how many host tasks (processes and threads) the
-- sandbox's host cgroup may hold (its pids.max; a qemu sandbox's QEMU
-- threads): its charge against its node's pids budget, set at admission
-- from its environment and memory (environment.HostPids).
-- nodes.pids_budget is the sum of those charges the node takes at most
-- (its --pids-budget, or what it derived from the host's pid_max and
-- threads-max); 0 bounds nothing. A node records its own at its next
-- start.
--
-- The live sandboxes stored before ran with the guest pids limit of the
-- time, 1024: charged what their environment allowed them then (runc and
-- crun 1024+64, qemu 256, runsc and anything not known 4*1024+256).

ALTER TABLE sandboxes ADD COLUMN host_pids INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN pids_budget INTEGER NOT NULL DEFAULT 0;
UPDATE sandboxes SET host_pids =
    CASE COALESCE((SELECT e.name FROM environments e WHERE e.ref = sandboxes.environment), sandboxes.runtime)
        WHEN 'runc' THEN 1088
        WHEN 'crun' THEN 1088
        WHEN 'qemu' THEN 256
        ELSE 4352
    END
    WHERE state NOT IN ('deleted', 'failed');
