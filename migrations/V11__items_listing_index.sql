-- GET /v1/items finds items by state, kind and priority in id order, and a bulk retry takes a
-- kind's failed items oldest first. Each (state, kind, priority) group is one range of this
-- index in id order; the listing reads at most a page of each group it needs and merges them,
-- so a page costs the same with a thousand items or a million (mostly done) ones.
--
-- Cost to know: every insert into core.items and every update that is not HOT (a state change
-- is never HOT: state is in the predicates of the lease indexes) writes one more index entry.
CREATE INDEX items_listing ON core.items (state, kind, priority, id);

-- How many items each (state, kind, priority) holds, for the planner: without it a group is
-- estimated from each column alone, and an empty group that looks large is walked in primary
-- key order through the whole table. Kept by ANALYZE; nothing on the write path.
CREATE STATISTICS core.items_listing_groups (mcv) ON state, kind, priority FROM core.items;
