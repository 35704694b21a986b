#!/bin/sh
# discover_hosts.sh - host discovery for an elastic horovodrun job. horovodrun
# runs it every second or so; what it prints, one "hostname:slots" line per
# host, is the set of hosts the job may use right now. Here the answer is a
# plain file that you (or a cluster tool) edit while the job runs; replace the
# body with a query to your scheduler or cloud API to adapt it.
#
# ELASTIC_HOSTS_FILE names the file (default: "hosts" beside this script).
# Blank lines and "#" comments in it are ignored.

hosts_file="${ELASTIC_HOSTS_FILE:-$(dirname "$0")/hosts}"
if [ ! -r "$hosts_file" ]; then
    # A failure is reported by horovodrun; the job keeps its last known hosts.
    echo "discover_hosts.sh: cannot read $hosts_file (set ELASTIC_HOSTS_FILE)" >&2
    exit 1
fi
sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$hosts_file"
