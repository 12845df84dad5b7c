-- Share leases: one row per resource group and node dividing its limits
-- (`Store::renew_share_lease`); a renewal drops the group's expired rows
-- under the group's advisory lock. Not tied to a run.
CREATE TABLE share_leases (
    resource_group TEXT COLLATE "C" NOT NULL,
    node           TEXT COLLATE "C" NOT NULL,
    expires_at_ms  BIGINT NOT NULL,
    PRIMARY KEY (resource_group, node)
);
