#!/usr/bin/env bash
# Makes sure headless Chromium is present for the checkout page's browser
# tests (httpapi/checkout_browser_test.go). Debian's `chromium` package is
# installed when /usr/bin/chromium is missing and we are root (CI); as any
# other user the script only says what is missing and the browser tests skip.
# curl, which the README's first session uses (httpapi/readme_e2e_test.go
# runs it), is installed the same way when missing.
#   scripts/chromium.sh   -> prints the path of the chromium binary
set -euo pipefail
BIN="${ESCROW_CHROMIUM:-/usr/bin/chromium}"
missing=()
[ -x "$BIN" ] || missing+=(chromium fonts-dejavu-core)
command -v curl >/dev/null || missing+=(curl)
if [ ${#missing[@]} -eq 0 ]; then
  echo "$BIN"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "${missing[*]} not found and not root: the browser tests will skip, the README test fails without curl (apt-get install ${missing[*]})" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
echo "$BIN"
