-- The stack's databases on a fresh PostgreSQL data directory: infra/compose.yaml mounts this file into
-- /docker-entrypoint-initdb.d/, which the postgres image runs (with psql, as POSTGRES_USER) only when the data
-- volume is empty; on an existing volume, create what is missing by hand with the same statements.
-- Names are forge/stack.py's: <prefix><service> with the default prefix "forge_", one database per service.
CREATE DATABASE forge_prefect;
CREATE DATABASE forge_mlflow;
CREATE DATABASE forge_review;

-- Prefect's server needs pg_trgm in its own database (its migrations create trigram indexes).
\connect forge_prefect
CREATE EXTENSION IF NOT EXISTS pg_trgm;
