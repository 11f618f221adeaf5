#!/usr/bin/env bash
# check.sh: lint and render the Helm chart for each topology in
# deploy/eventgate/ci/, and validate every rendered manifest with
# kubeconform against strict schemas derived from the Kubernetes API types
# (deploy/tools/k8sschema). Needs no network. Run through `make deploy-check`.
set -euo pipefail

BIN="${BIN:-$(pwd)/bin}"
chart="deploy/eventgate"
work="$(mktemp -d "${TMPDIR:-/tmp}/eventgate-deploy-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT

die() { echo "deploy-check: $*" >&2; exit 1; }

"$BIN/k8sschema" -out "$work/schemas"
schemas="$work/schemas/{{ .ResourceKind }}{{ .KindSuffix }}.json"

# Without the NATS chart in charts/ (it is fetched by `helm dependency
# build`, which needs the network), the topologies that bring their own NATS
# are checked on a copy of the chart without the dependency.
subchart=""
src="$chart"
if compgen -G "$chart/charts/nats-*.tgz" >/dev/null; then
  subchart=yes
else
  cp -r "$chart" "$work/chart"
  sed -i '/^dependencies:/,$d' "$work/chart/Chart.yaml"
  src="$work/chart"
fi

rendered=0
for values in "$chart"/ci/*.yaml; do
  name="$(basename "$values" .yaml)"
  if [[ "$name" == *nats-subchart* && -z "$subchart" ]]; then
    echo "deploy-check: $name not rendered: the NATS chart is not in $chart/charts/ (helm dependency build $chart)"
    continue
  fi
  echo "deploy-check: $name"
  "$BIN/helm" lint --strict "$src" -f "$values" >"$work/$name.lint" 2>&1 || { cat "$work/$name.lint" >&2; die "helm lint failed for $name"; }
  "$BIN/helm" template "eg" "$src" --namespace eventgate -f "$values" >"$work/$name.yaml"
  "$BIN/kubeconform" -strict -summary -schema-location "$schemas" "$work/$name.yaml"
  rendered=$((rendered + 1))
done
[[ $rendered -gt 0 ]] || die "no topology rendered"

# What the topologies must say, beyond schema validity.
m="$work/embedded-external-nats.yaml"
grep -q 'terminationGracePeriodSeconds: 40' "$m" || die "terminationGracePeriodSeconds does not match --shutdown-timeout (30s) plus 10s"
grep -q -- '--shutdown-timeout=30s' "$m" || die "--shutdown-timeout not passed"
grep -q -- '--replica-id=$(POD_NAME)' "$m" || die "replicas are not named after their pods"
grep -q 'volumeClaimTemplates:' "$m" || die "embedded engines have no volume of their own"
grep -q 'readOnlyRootFilesystem: true' "$m" || die "the root filesystem is writable"
grep -q 'path: /readyz' "$m" || die "no readiness probe on /readyz"
grep -q 'kind: PodDisruptionBudget' "$m" || die "no PodDisruptionBudget"
c="$work/clickhouse-external-nats.yaml"
grep -q 'name: EVENTGATE_CLICKHOUSE_DSN' "$c" || die "the ClickHouse topology passes no DSN"
if grep -q 'volumeClaimTemplates:' "$c"; then die "the ClickHouse topology claims volumes"; fi

# The schemas are strict: a misspelt field or a wrong type is refused.
sed 's/readOnlyRootFilesystem:/readOnlyRootFileSystem:/' "$m" >"$work/typo.yaml"
if "$BIN/kubeconform" -strict -schema-location "$schemas" "$work/typo.yaml" >/dev/null 2>&1; then die "kubeconform accepted a misspelt field"; fi
sed 's/terminationGracePeriodSeconds: 40/terminationGracePeriodSeconds: forty/' "$m" >"$work/type.yaml"
if "$BIN/kubeconform" -strict -schema-location "$schemas" "$work/type.yaml" >/dev/null 2>&1; then die "kubeconform accepted a string for an integer"; fi

# Misconfigurations fail at render time with a message naming the fix.
expect_fail() {
  local want="$1"; shift
  if out="$("$BIN/helm" template eg "$src" "$@" 2>&1)"; then die "rendered although: $want"; fi
  grep -q -- "$want" <<<"$out" || die "render failed without saying \"$want\": $out"
}
expect_fail "auth.tokensSecret or auth.tokens is required" --set nats.enabled=false --set natsUrl=nats://n:4222
expect_fail "store.mode must be embedded or clickhouse" --set nats.enabled=false --set natsUrl=nats://n:4222 --set auth.tokensSecret=t --set store.mode=s3
expect_fail "store.clickhouse.dsn or store.clickhouse.dsnSecret.name is required" --set nats.enabled=false --set natsUrl=nats://n:4222 --set auth.tokensSecret=t --set store.mode=clickhouse
expect_fail "natsUrl is required when nats.enabled is false" --set nats.enabled=false --set auth.tokensSecret=t
echo "deploy-check: ok ($rendered topologies rendered and validated)"
