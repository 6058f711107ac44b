#!/bin/sh
# Runs once, on an empty data volume (the postgres image's /docker-entrypoint-initdb.d):
# a read-only role for Grafana's ledger panels (docs/dashboards.md), able to read every
# table the gateway's migrations create later as $POSTGRES_USER.
set -eu
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v reader="${GRAFANA_DB_USER:-grafana_reader}" -v password="$GRAFANA_DB_PASSWORD" \
    -v owner="$POSTGRES_USER" <<'SQL'
CREATE ROLE :"reader" LOGIN PASSWORD :'password';
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public GRANT SELECT ON TABLES TO :"reader";
SQL
