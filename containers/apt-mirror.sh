#!/usr/bin/env bash
# Print the Debian mirror this machine's apt already uses (so no file in the repo names a host).
set -euo pipefail
uri=$(awk 'tolower($1)=="uris:" {print $2}' /etc/apt/sources.list.d/*.sources 2>/dev/null |
    grep -v -- '-security' | head -n 1 || true)
[ -n "$uri" ] || uri=$(awk '$1=="deb" && $2 !~ /^\[/ && $0 !~ /security/ {print $2; exit}' \
    /etc/apt/sources.list 2>/dev/null || true)
[ -n "$uri" ] || { echo "apt-mirror: no Debian mirror found in /etc/apt/sources.list{,.d}" >&2; exit 1; }
echo "${uri%/}"
