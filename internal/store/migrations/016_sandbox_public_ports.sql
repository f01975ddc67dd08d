-- 016_sandbox_public_ports: whether a sandbox's guest ports are public.
--
-- public_ports is 1 for a sandbox whose guest ports answer without a
-- credential through the E2B gateway (<port>-<id>.<domain> hosts and the
-- E2b-Sandbox-* headers), as an E2B sandbox's do, else 0; set at create
-- (the E2B API's default). Before this column the rule was the sandbox's
-- e2b.airlock/template-id metadata key, which every sandbox the E2B API
-- created carries: those keep public ports.

ALTER TABLE sandboxes ADD COLUMN public_ports INTEGER NOT NULL DEFAULT 0;
UPDATE sandboxes SET public_ports = 1
    WHERE id IN (SELECT sandbox_id FROM sandbox_metadata WHERE key = 'e2b.airlock/template-id');
