SET LOCAL statement_timeout = '30min';
SET LOCAL plan_cache_mode = force_custom_plan;
SET LOCAL jit = off
