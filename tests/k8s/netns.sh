# netns.sh: "pods" on this machine for the multi-host tests: one network
# namespace per pod, each with its own address on a bridge (the bridge lives
# in a namespace of its own, so the host's network is never touched), its own
# /etc/hosts giving Kubernetes-style names (ip netns exec bind-mounts
# /etc/netns/<ns>/hosts over /etc/hosts) and, through a UTS namespace, its
# own host name. A test sources it and calls netns_test_begin. Needs root
# (CAP_NET_ADMIN, CAP_SYS_ADMIN).
NETNS_PREFIX="wk$$"
NETNS_SWITCH="${NETNS_PREFIX}-sw"
NETNS_PODS=() # pod names, in order
declare -A NETNS_IP NETNS_NS NETNS_PORT
PGIDS=() # process groups of the pods started (start_pod)

# netns_supported: 0 when namespaces can be created here.
netns_supported() {
	command -v ip >/dev/null && command -v unshare >/dev/null || return 1
	ip netns add "${NETNS_PREFIX}-probe" 2>/dev/null || return 1
	ip netns del "${NETNS_PREFIX}-probe"
	unshare --uts true 2>/dev/null
}

# netns_switch: the bridge every pod's veth plugs into.
netns_switch() {
	ip netns add "$NETNS_SWITCH"
	ip -n "$NETNS_SWITCH" link add br0 type bridge
	ip -n "$NETNS_SWITCH" link set br0 up
}

# netns_pod NAME IP: a namespace for pod NAME (e.g. ps-0) at address IP/24.
netns_pod() {
	local name=$1 ip=$2 i=${#NETNS_PODS[@]}
	local ns="${NETNS_PREFIX}-$i"
	ip netns add "$ns"
	ip -n "$NETNS_SWITCH" link add "port$i" type veth peer name eth0 netns "$ns"
	ip -n "$NETNS_SWITCH" link set "port$i" master br0 up
	ip -n "$ns" addr add "$ip/24" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$ns" link set lo up
	NETNS_PODS+=("$name")
	NETNS_IP[$name]=$ip
	NETNS_NS[$name]=$ns
	NETNS_PORT[$name]="port$i"
}

# netns_hosts DOMAIN: every pod's /etc/hosts: localhost, itself as the
# kubelet writes it, and every pod under <pod>.<service>.DOMAIN and
# <pod>.<service> (what the cluster DNS answers). The service of pod
# "worker-1" is "worker".
netns_hosts() {
	local domain=$1 p q
	for p in "${NETNS_PODS[@]}"; do
		mkdir -p "/etc/netns/${NETNS_NS[$p]}"
		{
			printf '127.0.0.1\tlocalhost\n'
			printf '%s\t%s.%s.%s %s\n' "${NETNS_IP[$p]}" "$p" "${p%-*}" "$domain" "$p"
			for q in "${NETNS_PODS[@]}"; do
				[ "$q" = "$p" ] && continue
				printf '%s\t%s.%s.%s %s.%s\n' "${NETNS_IP[$q]}" "$q" "${q%-*}" "$domain" \
					"$q" "${q%-*}"
			done
		} >"/etc/netns/${NETNS_NS[$p]}/hosts"
	done
}

# netns_run POD CMD...: CMD in POD's namespace with POD as its host name.
netns_run() {
	local pod=$1
	shift
	ip netns exec "${NETNS_NS[$pod]}" unshare --uts \
		sh -c 'hostname "$0" && exec "$@"' "$pod" "$@"
}

# netns_cut POD: pull POD's cable (its port on the bridge goes down).
netns_cut() {
	ip -n "$NETNS_SWITCH" link set "${NETNS_PORT[$1]}" down
}

# start_pod POD ROLE INDEX|- -- ARGS: weft ARGS in the pod with the variables
# of POD_ENV (the pods' ConfigMap) and WEFT_ROLE (and JOB_COMPLETION_INDEX),
# in the background, in its own process group (added to PGIDS); output in
# POD.log; pid in PID[POD].
declare -A PID
start_pod() {
	local pod=$1 role=$2 idx=$3
	shift 4
	local env=("${POD_ENV[@]}" "WEFT_ROLE=$role")
	[ "$idx" != - ] && env+=("JOB_COMPLETION_INDEX=$idx")
	setsid ip netns exec "${NETNS_NS[$pod]}" unshare --uts \
		sh -c 'hostname "$0" && exec "$@"' "$pod" env "${env[@]}" "$WEFT" "$@" \
		>"$pod.log" 2>&1 &
	PID[$pod]=$!
	PGIDS+=("$!")
}

# wait_exit POD SECONDS: the pod's exit status in $rc (fails when it runs longer).
wait_exit() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		if ! kill -0 "${PID[$1]}" 2>/dev/null; then
			rc=0
			wait "${PID[$1]}" || rc=$?
			return 0
		fi
		sleep 0.1
	done
	fail "$1 still running after $2 s"
}

# netns_test_begin: a test on pods begins: WEFT and WEFT_SRC checked, no
# cluster identity inherited, a fresh $WORK as the current directory,
# removed with the pods and namespaces on exit, fail() (the pods' logs with
# the message); skips (77) without the privileges to create namespaces.
netns_test_begin() {
	: "${WEFT:?set WEFT to the weft binary}"
	: "${WEFT_SRC:?set WEFT_SRC to the source tree}"
	unset TF_CONFIG OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE JOB_COMPLETION_INDEX WEFT_ROLE
	WEFT=$(readlink -f "$WEFT")
	WORK=$(mktemp -d /tmp/weft-netns-test.XXXXXX)
	chmod 755 "$WORK"
	trap 'netns_cleanup; rm -rf "$WORK"' EXIT
	cd "$WORK"
	fail() {
		echo "FAIL: $*" >&2
		for f in "$WORK"/*.log; do
			[ -f "$f" ] && { echo "--- $f (last 30 lines)" >&2; tail -30 "$f" >&2; }
		done
		exit 1
	}
	if [ "$(id -u)" != 0 ] || ! netns_supported; then
		echo "SKIP: cannot create network and UTS namespaces here (needs root:" \
			"CAP_NET_ADMIN, CAP_SYS_ADMIN, and iproute2's ip)"
		exit 77
	fi
}

# netns_cleanup: the pods' processes killed, the namespaces removed.
netns_cleanup() {
	local p
	for p in "${PGIDS[@]+"${PGIDS[@]}"}"; do
		kill -9 -- "-$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	for p in "${NETNS_PODS[@]+"${NETNS_PODS[@]}"}"; do
		ip netns del "${NETNS_NS[$p]}" 2>/dev/null || true
		rm -rf "/etc/netns/${NETNS_NS[$p]}"
	done
	ip netns del "$NETNS_SWITCH" 2>/dev/null || true
	rmdir /etc/netns 2>/dev/null || true
}
