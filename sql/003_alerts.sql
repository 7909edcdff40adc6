-- 003_alerts.sql: triage status, the alert outbox and its delivery records.
--
--   findings.status + finding_status_history   who changed a finding, when, why
--   sandtrail_triage(finding, status, by, note) the one way to change it
--   notifications                              the outbox: one row per thing
--                                              on-call must hear of
--   notification_queue                         one row per (notification,
--                                              receiver): what is still to send
--   deliveries                                 every attempt, kept
--   finding_notices                            "was on-call told about finding
--                                              X, and when": one query
--
-- The analyzer writes notifications in the batch transaction that changes
-- the findings (analyzer/sinks/outbox.c); sandtrail_triage writes them for
-- resolutions. sandtrail-alerter sends them.

CREATE TYPE finding_status AS ENUM ('open', 'acknowledged', 'resolved', 'false_positive');

ALTER TABLE findings
    ADD COLUMN status            finding_status NOT NULL DEFAULT 'open',
    ADD COLUMN status_changed_at timestamptz;
CREATE INDEX findings_status ON findings (status) WHERE status IN ('open', 'acknowledged');

-- Every status change, never updated or deleted.
CREATE TABLE finding_status_history (
    change_id    bigserial      PRIMARY KEY,
    finding_id   text           NOT NULL REFERENCES findings (finding_id) ON DELETE CASCADE,
    changed_at   timestamptz    NOT NULL DEFAULT now(),
    changed_by   text           NOT NULL,     -- the person, as given (--by)
    db_user      text           NOT NULL DEFAULT session_user, -- the role that ran it
    from_status  finding_status NOT NULL,
    to_status    finding_status NOT NULL,
    note         text           NOT NULL DEFAULT ''
);
CREATE INDEX finding_status_history_finding ON finding_status_history (finding_id, changed_at);

-- The outbox. A finding's first appearance ('created') and each severity it
-- rises to ('severity_raised') are keyed by (finding_id, kind, severity), so
-- a redone batch or a replay from offset 0 adds nothing; a resolution or
-- dismissal ('resolved', 'dismissed') by the status change that caused it.
CREATE TABLE notifications (
    notification_id bigserial   PRIMARY KEY,
    delivery_id     text        NOT NULL UNIQUE, -- X-Sandtrail-Delivery: stable, derived from the key
    finding_id      text        NOT NULL REFERENCES findings (finding_id) ON DELETE CASCADE,
    kind            text        NOT NULL
                    CHECK (kind IN ('created', 'severity_raised', 'resolved', 'dismissed')),
    severity        severity    NOT NULL,
    task_id         text        NOT NULL,
    change_id       bigint      REFERENCES finding_status_history (change_id),
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK ((change_id IS NULL) = (kind IN ('created', 'severity_raised'))),
    UNIQUE NULLS NOT DISTINCT (finding_id, kind, severity, change_id)
);
CREATE INDEX notifications_created ON notifications (created_at);

-- What is still to be sent to whom. The alerter adds a row for each
-- receiver it serves when it first sees a notification, and claims pending
-- rows with FOR UPDATE SKIP LOCKED, so alerters can run side by side.
-- state: pending (to send at next_attempt_at), held (throttled: goes out in
-- the digest of its receiver and task when the window closes, at
-- next_attempt_at), delivered, failed (for good: a refusing 4xx or attempts
-- exhausted; `sandtrail alerts retry` resets it).
CREATE TABLE notification_queue (
    notification_id bigint      NOT NULL REFERENCES notifications ON DELETE CASCADE,
    receiver        text        NOT NULL,    -- "alertmanager", "webhook", "webhook.2", ...
    state           text        NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'held', 'delivered', 'failed')),
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    done_at         timestamptz,
    PRIMARY KEY (notification_id, receiver)
);
CREATE INDEX notification_queue_due ON notification_queue (next_attempt_at)
    WHERE state IN ('pending', 'held');
CREATE INDEX notification_queue_receiver ON notification_queue (receiver, notification_id);

-- Every delivery attempt, whatever its outcome. A notification held by the
-- throttle gets a 'held' row, then rows for the digest that carried it
-- (digest_id: that digest's X-Sandtrail-Delivery).
CREATE TABLE deliveries (
    attempt_id      bigserial   PRIMARY KEY,
    notification_id bigint      NOT NULL REFERENCES notifications ON DELETE CASCADE,
    receiver        text        NOT NULL,
    attempt         integer     NOT NULL,   -- 1 for the first
    attempted_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    outcome         text        NOT NULL CHECK (outcome IN ('delivered', 'retry', 'failed', 'held')),
    http_status     integer,                -- NULL when no answer came
    error           text,
    digest_id       text,
    alerter         text                    -- host:pid of the alerter that tried
);
CREATE INDEX deliveries_notification ON deliveries (notification_id, attempted_at);

-- For each finding, each notification and receiver: when it was first
-- delivered, alone or in a digest (NULL: not yet), how many attempts, and
-- the queue state.
CREATE VIEW finding_notices AS
SELECT n.finding_id, n.notification_id, n.delivery_id, n.kind, n.severity,
       n.created_at AS notified_at, q.receiver, q.state, q.attempts,
       (SELECT min(d.attempted_at) FROM deliveries d
         WHERE d.notification_id = n.notification_id AND d.receiver = q.receiver
           AND d.outcome = 'delivered') AS delivered_at,
       (SELECT min(d.digest_id) FROM deliveries d
         WHERE d.notification_id = n.notification_id AND d.receiver = q.receiver
           AND d.outcome = 'delivered') AS digest_id
FROM notifications n
JOIN notification_queue q USING (notification_id);

-- LISTEN sandtrail_alerts: woken at each commit that adds notifications.
CREATE FUNCTION sandtrail_notifications_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sandtrail_alerts', '');
    RETURN NULL;
END $$;
CREATE TRIGGER notifications_notify AFTER INSERT ON notifications
    FOR EACH STATEMENT EXECUTE FUNCTION sandtrail_notifications_notify();

-- Changes a finding's status, records who did it and why, and queues a
-- 'resolved' or 'dismissed' notification when an alert must end. Returns
-- the history row's id, or NULL when the finding already had that status.
-- Raises when the finding does not exist or by is empty.
--
-- SECURITY DEFINER: a role granted EXECUTE can triage without any right on
-- the tables; db_user still records the login role (session_user). No one
-- but the owner may call it until granted (analyst roles, sql/005).
CREATE FUNCTION sandtrail_triage(p_finding_id text, p_status finding_status,
                                 p_by text, p_note text DEFAULT '')
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
    f findings%ROWTYPE;
    cid bigint;
BEGIN
    IF p_by IS NULL OR btrim(p_by) = '' THEN
        RAISE EXCEPTION 'triage needs the name of who changes the finding'
            USING ERRCODE = '22023';
    END IF;
    SELECT * INTO f FROM findings WHERE finding_id = p_finding_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no finding "%"', p_finding_id USING ERRCODE = 'P0002';
    END IF;
    IF f.status = p_status THEN
        RETURN NULL;
    END IF;
    INSERT INTO finding_status_history (finding_id, changed_by, from_status, to_status, note)
    VALUES (p_finding_id, p_by, f.status, p_status, coalesce(p_note, ''))
    RETURNING change_id INTO cid;
    UPDATE findings SET status = p_status, status_changed_at = now()
     WHERE finding_id = p_finding_id;
    IF p_status IN ('resolved', 'false_positive') THEN
        INSERT INTO notifications (delivery_id, finding_id, kind, severity, task_id, change_id)
        VALUES (p_finding_id || '.' || CASE p_status WHEN 'resolved' THEN 'resolved'
                                                       ELSE 'dismissed' END || '.' || cid,
                p_finding_id,
                CASE p_status WHEN 'resolved' THEN 'resolved' ELSE 'dismissed' END,
                f.severity, f.task_id, cid);
    END IF;
    RETURN cid;
END $$;
REVOKE ALL ON FUNCTION sandtrail_triage(text, finding_status, text, text) FROM PUBLIC;
