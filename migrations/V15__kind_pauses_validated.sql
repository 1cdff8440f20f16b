-- V14's CHECK on core.ledger.subject_type, validated (SHARE UPDATE EXCLUSIVE: reads and
-- writes go on).
ALTER TABLE core.ledger VALIDATE CONSTRAINT ledger_subject_type_check;
