#!/bin/sh
# Makes sure the Debian packages the tests drive as real clients are here:
# chromium (/usr/bin/chromium, the web console's browser tests, driven from
# Go with chromedp) and python3-tuspy (tuspy, a tus client library, for the
# resumable uploads' test; Debian's /usr/bin/python3 imports it). All
# present: nothing to do. Some missing and running as root: installs them
# with apt-get (chromium is about 125 MB of packages). Missing otherwise:
# prints the command to run and fails at once. CONSOLE_BROWSER=skip (the
# browser tests skipped on purpose) needs no browser.
set -eu
missing=""
if [ ! -x /usr/bin/chromium ] && [ "${CONSOLE_BROWSER:-}" != skip ]; then
  missing="$missing chromium"
fi
if ! /usr/bin/python3 -c 'import tusclient' 2>/dev/null; then
  missing="$missing python3-tuspy"
fi
if [ -z "$missing" ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  echo "installing Debian's$missing for the tests (apt-get)..."
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
  exit 0
fi
echo "The tests need Debian's$missing. Install with:" >&2
echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends$missing" >&2
echo "(CONSOLE_BROWSER=skip runs the tests without the browser tests, and without chromium.)" >&2
exit 1
