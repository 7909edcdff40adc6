-- 002_integrity.sql: event time a sender cannot forge (issue 13).
--
-- received_at is when the collector produced the event (the Kafka message's
-- CreateTime); an event whose ts lies more than detect.max_future_s after
-- it, or more than detect.max_past_s before it, is skewed: the analyzer
-- detects on received_at instead and moves no watermark with it. ts keeps
-- the time the event claimed.
ALTER TABLE events ADD COLUMN received_at timestamptz;
ALTER TABLE events ADD COLUMN skewed boolean NOT NULL DEFAULT false;

-- evidence that is skewed, like late_event_count
ALTER TABLE findings ADD COLUMN skewed_event_count integer NOT NULL DEFAULT 0;
