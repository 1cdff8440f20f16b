-- V12's CHECK on core.items.state, validated (SHARE UPDATE EXCLUSIVE: reads and writes go on).
ALTER TABLE core.items VALIDATE CONSTRAINT items_state_check;
