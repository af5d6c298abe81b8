#!/usr/bin/env bash
# Makes sure headless Chromium is present for the checkout page's browser
# tests (httpapi/checkout_browser_test.go). Debian's `chromium` package is
# installed when /usr/bin/chromium is missing and we are root (CI); as any
# other user the script only says what is missing and the browser tests skip.
#   scripts/chromium.sh   -> prints the path of the chromium binary
set -euo pipefail
BIN="${ESCROW_CHROMIUM:-/usr/bin/chromium}"
if [ -x "$BIN" ]; then
  echo "$BIN"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "chromium not found at $BIN and not root: the browser tests will skip (apt-get install chromium)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
echo "$BIN"
