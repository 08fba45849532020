#!/bin/sh
# Makes sure Debian's Chromium is at /usr/bin/chromium, for the web console's
# browser test (scripts/e2e TestConsoleInBrowser, driven from Go with
# chromedp). Present: nothing to do. Missing and running as root: installs it
# with apt-get (about 125 MB of packages). Missing otherwise: prints the
# command to run and fails at once. CONSOLE_BROWSER=skip (the browser test
# skipped on purpose) needs no browser.
set -eu
if [ -x /usr/bin/chromium ] || [ "${CONSOLE_BROWSER:-}" = skip ]; then
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
  echo "installing Debian's chromium for the browser tests (apt-get)..."
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium
  exit 0
fi
echo "The browser tests need Debian's Chromium at /usr/bin/chromium. Install it with:" >&2
echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends chromium" >&2
echo "or set CONSOLE_BROWSER=skip to run the tests without the browser test." >&2
exit 1
