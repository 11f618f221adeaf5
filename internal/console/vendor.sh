#!/usr/bin/env bash
# Vendors the console's chart library into assets/vendor from the version
# package-lock.json pins, so that go build needs no network. Run it after
# changing the pin (npm install uplot@X --save-exact), and commit the result;
# TestVendoredUPlotMatchesLockfile fails when they drift.
set -euo pipefail
cd "$(dirname "$0")"
npm ci --ignore-scripts --no-audit --no-fund
mkdir -p assets/vendor
cp node_modules/uplot/dist/uPlot.iife.min.js node_modules/uplot/dist/uPlot.min.css assets/vendor/
cp node_modules/uplot/LICENSE assets/vendor/uPlot.LICENSE
rm -rf node_modules
