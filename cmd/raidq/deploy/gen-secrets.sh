#!/bin/sh
# gen-secrets.sh makes what compose.yaml mounts into the six nodes, in
# ./secrets (README.md):
#
#   secrets/pki/           the CA (ca.pem, ca-key.pem: keep the key offline)
#                          and every node's certificate; never mounted
#   secrets/nX/            what node nX mounts at /etc/raidq: ca.pem,
#                          node.pem, node-key.pem (its own only), auth.conf
#   secrets/passwords.env  the users' plain passwords, for clients
#   secrets/grafana/       Grafana's admin password (profile monitoring)
#
# Users in auth.conf: ops (admin: topics, status) and app (produce and
# consume every topic); their passwords are random and stored as bcrypt
# hashes. The routes authenticate with mutual TLS. Node certificates name
# nX (the compose host name), its fixed address RAIDQ_NET.1X (NATS gossips
# addresses; compose.yaml says why), localhost and 127.0.0.1, so clients
# on this host reach the published ports with --tls-ca secrets/ca.pem.
#
# RAIDQ names the raidq binary (default: ./raidq, the static binary the
# image is built from). Files end up owned by 10001:10001, the image's
# user, when run as root; otherwise the script says what to chown.
set -eu
cd "$(dirname "$0")"
RAIDQ=${RAIDQ:-./raidq}
NODES=${NODES:-"n0 n1 n2 n3 n4 n5"}
RAIDQ_NET=${RAIDQ_NET:-172.29.42} # compose.yaml's network: node nX is RAIDQ_NET.1X
OWNER=${OWNER:-10001:10001}

if [ -e secrets ]; then
	echo "secrets/ exists; remove it to make new ones (the nodes' data does not depend on it)" >&2
	exit 1
fi
if ! "$RAIDQ" version >/dev/null 2>&1; then
	echo "no raidq binary at $RAIDQ: build it (CGO_ENABLED=0 go build -o cmd/raidq/deploy/raidq ./cmd/raidq) or set RAIDQ" >&2
	exit 1
fi
umask 077
mkdir -p secrets/pki secrets/grafana

# password prints a random password of 24 URL-safe characters.
password() { head -c 18 /dev/urandom | base64 | tr '+/' '-_'; }

for n in $NODES; do
	"$RAIDQ" security certs --dir secrets/pki --name "$n" --hosts "$n,$RAIDQ_NET.1${n#n},localhost,127.0.0.1" >/dev/null
done
cp secrets/pki/ca.pem secrets/ca.pem && chmod 0644 secrets/ca.pem # public: for clients

ops=$(password)
app=$(password)
ops_hash=$(printf '%s\n' "$ops" | "$RAIDQ" security passwd)
app_hash=$(printf '%s\n' "$app" | "$RAIDQ" security passwd)
cat >secrets/auth.conf <<CONF
# raidq auth file (docs/security.md), made by gen-secrets.sh.
users: [
  {user: ops, password: "$ops_hash", roles: [admin]}
  {user: app, password: "$app_hash", producer: ["*"], consumer: ["*"]}
]
CONF
cat >secrets/passwords.env <<ENV
RAIDQ_OPS_PASSWORD=$ops
RAIDQ_APP_PASSWORD=$app
ENV
password >secrets/grafana/admin-password

for n in $NODES; do
	mkdir -p "secrets/$n"
	cp secrets/pki/ca.pem "secrets/$n/ca.pem"
	cp "secrets/pki/$n.pem" "secrets/$n/node.pem"
	cp "secrets/pki/$n-key.pem" "secrets/$n/node-key.pem"
	cp secrets/auth.conf "secrets/$n/auth.conf"
	chmod 0500 "secrets/$n"
	chmod 0400 "secrets/$n"/*
done

# The nodes ask for RAIDQ_NOFILE open files (compose.yaml, 65536); runc
# cannot raise a container's limit past the Docker daemon's own, and every
# node then fails with "error setting rlimits". Where the daemon's hard
# limit is lower, write that limit to .env (docker-compose reads it).
nofile_limit() {
	pid=$(pidof dockerd 2>/dev/null | cut -d' ' -f1) || return 1
	[ -n "$pid" ] && awk '/^Max open files/ {print $5}' "/proc/$pid/limits" 2>/dev/null
}
want=65536
if have=$(nofile_limit) && [ -n "$have" ] && [ "$have" != unlimited ] && [ "$have" -lt "$want" ]; then
	if [ -e .env ] && grep -q '^RAIDQ_NOFILE=' .env; then
		echo "the Docker daemon allows $have open files; .env already sets $(grep '^RAIDQ_NOFILE=' .env)"
	else
		echo "RAIDQ_NOFILE=$have" >>.env
		echo "the Docker daemon allows $have open files (below $want): wrote RAIDQ_NOFILE=$have to .env"
	fi
fi

if [ "$(id -u)" = 0 ]; then
	for n in $NODES; do chown -R "$OWNER" "secrets/$n"; done
	chown -R 472:0 secrets/grafana # the Grafana image's user
	echo "secrets/ written; node directories owned by $OWNER"
else
	echo "secrets/ written; now give the nodes their files:"
	echo "  sudo chown -R $OWNER $(for n in $NODES; do printf 'secrets/%s ' "$n"; done)"
	echo "  sudo chown -R 472:0 secrets/grafana   # only for the monitoring profile"
fi
