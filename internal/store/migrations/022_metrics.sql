-- 022_metrics: sandboxes' resource use over time (getMetrics).
--
-- Each node samples the CPU, memory and disk use of its running and paused
-- sandboxes every 5 s (internal/usage) and adds one row per sandbox. Rows
-- older than the retention window (usage.Retention, 6 h: at most 4320 samples of a sandbox; a sandbox that lives longer keeps its last 6 h) are removed by the
-- sampler as it adds new ones, and a sandbox's rows go when it becomes
-- deleted (and with its row, at the latest, when the purge removes it).
-- cpu_used_pct is stored in hundredths of a percent.

CREATE TABLE sandbox_metrics (
    sandbox_id   TEXT    NOT NULL,
    at           BIGINT  NOT NULL,
    cpu_count    INTEGER NOT NULL,
    cpu_used_pct INTEGER NOT NULL,
    mem_used     BIGINT  NOT NULL,
    mem_cache    BIGINT  NOT NULL,
    mem_total    BIGINT  NOT NULL,
    disk_used    BIGINT  NOT NULL,
    disk_total   BIGINT  NOT NULL,
    PRIMARY KEY (sandbox_id, at)
);
CREATE INDEX sandbox_metrics_at ON sandbox_metrics (at);
