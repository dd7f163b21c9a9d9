#!/usr/bin/env bash
# K replicas of `qvl serve` behind nginx (docs/serving.md, "Replicas behind nginx").
#
# usage: scripts/serve-replicas.sh -m MODEL_DIR [options] [-- QVL_SERVE_ARGS...]
#   -k, --replicas K      replicas (default: one per --gpus or --cpus entry, else 2)
#   --host ADDR           address nginx listens on (default 127.0.0.1)
#   --port N              port nginx listens on (default 8080)
#   --base-port N         replica i listens on 127.0.0.1:N+i (default: --port + 1)
#   --gpus LIST           comma-separated GPU ids: replica i runs with CUDA_VISIBLE_DEVICES=LIST[i]
#   --cpus LIST           CPU sets separated by '/', e.g. 0-3/4-7: replica i runs under
#                         `taskset -c SET[i]` (give --threads too, or each replica starts a
#                         thread per core of the machine)
#   --threads N           qvl serve -t N for every replica (CPU backend threads)
#   --request-timeout S   qvl serve --request-timeout S; nginx waits S + 60 s for an answer
#                         (default: qvl's 600)
#   --qvl PATH            the qvl program (default: build/tools/qvl of this checkout, else qvl
#                         on PATH)
#   --nginx PATH          the nginx program (default: nginx on PATH or /usr/sbin/nginx)
#   --dir DIR             nginx's config, pid, logs, temp files and the replicas' logs go here
#                         (default: a new temporary directory, removed on exit)
# Arguments after -- go to every replica (e.g. --parallel 4 --ctx 8192 --backend cpu_avx2).
#
# Runs in the foreground until SIGINT/SIGTERM or until nginx stops, then stops nginx and every
# replica (SIGTERM, SIGKILL after 30 s). A replica that dies is reported and left out by nginx;
# the others keep serving. Nothing needs root: nginx runs from --dir with its own pid, log and
# temp paths.
set -euo pipefail

die() { echo "serve-replicas: $*" >&2; exit 2; }
say() { echo "serve-replicas: $*"; }

here=$(cd "$(dirname "$0")" && pwd)
model="" replicas="" host=127.0.0.1 port=8080 base_port="" gpus="" cpus="" threads=""
request_timeout=600 qvl="" nginx="" dir="" keep_dir=0
while [ $# -gt 0 ]; do
  case "$1" in
    -m|--model) model=${2:?}; shift 2 ;;
    -k|--replicas) replicas=${2:?}; shift 2 ;;
    --host) host=${2:?}; shift 2 ;;
    --port) port=${2:?}; shift 2 ;;
    --base-port) base_port=${2:?}; shift 2 ;;
    --gpus) gpus=${2:?}; shift 2 ;;
    --cpus) cpus=${2:?}; shift 2 ;;
    --threads) threads=${2:?}; shift 2 ;;
    --request-timeout) request_timeout=${2:?}; shift 2 ;;
    --qvl) qvl=${2:?}; shift 2 ;;
    --nginx) nginx=${2:?}; shift 2 ;;
    --dir) dir=${2:?}; keep_dir=1; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    *) die "unknown option $1 (--help lists them; qvl serve's own options go after --)" ;;
  esac
done
extra=("$@")

is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }
[ -n "$model" ] || die "-m MODEL_DIR is required"
[ -d "$model" ] || die "-m $model: no such directory"
IFS=, read -r -a gpu_list <<< "$gpus"
IFS=/ read -r -a cpu_list <<< "$cpus"
if [ -z "$replicas" ]; then
  replicas=2
  [ ${#gpu_list[@]} -gt 0 ] && replicas=${#gpu_list[@]}
  [ ${#cpu_list[@]} -gt 0 ] && replicas=${#cpu_list[@]}
fi
is_uint "$replicas" && [ "$replicas" -ge 1 ] && [ "$replicas" -le 256 ] ||
  die "--replicas $replicas: not a number from 1 to 256"
is_uint "$port" && [ "$port" -ge 1 ] && [ "$port" -le 65535 ] || die "--port $port: not a TCP port"
[ -n "$base_port" ] || base_port=$((port + 1))
is_uint "$base_port" && [ "$base_port" -ge 1 ] && [ $((base_port + replicas - 1)) -le 65535 ] ||
  die "--base-port $base_port: the $replicas replica ports do not fit below 65536"
if [ "$port" -ge "$base_port" ] && [ "$port" -lt $((base_port + replicas)) ]; then
  die "--port $port is one of the replicas' ports ($base_port..$((base_port + replicas - 1)))"
fi
is_uint "$request_timeout" || die "--request-timeout $request_timeout: not a number of seconds"
[ -z "$threads" ] || is_uint "$threads" || die "--threads $threads: not a number"
[ ${#gpu_list[@]} -eq 0 ] || [ ${#gpu_list[@]} -ge "$replicas" ] ||
  die "--gpus names ${#gpu_list[@]} GPU(s) for $replicas replicas"
[ ${#cpu_list[@]} -eq 0 ] || [ ${#cpu_list[@]} -ge "$replicas" ] ||
  die "--cpus names ${#cpu_list[@]} CPU set(s) for $replicas replicas"
if [ ${#cpu_list[@]} -gt 0 ]; then
  command -v taskset > /dev/null || die "--cpus needs taskset (Debian: util-linux)"
fi

if [ -z "$qvl" ]; then
  if [ -x "$here/../build/tools/qvl" ]; then qvl="$here/../build/tools/qvl"
  else qvl=$(command -v qvl) || die "no qvl program: build it (README) or give --qvl PATH"; fi
fi
[ -x "$qvl" ] || die "--qvl $qvl: not an executable"
if [ -z "$nginx" ]; then
  nginx=$(command -v nginx || true)
  [ -n "$nginx" ] || [ ! -x /usr/sbin/nginx ] || nginx=/usr/sbin/nginx
  [ -n "$nginx" ] || die "nginx not found (Debian: apt-get install nginx; scripts/install-deps.sh)"
fi
[ -x "$nginx" ] || die "--nginx $nginx: not an executable"

if [ -z "$dir" ]; then
  dir=$(mktemp -d "${TMPDIR:-/tmp}/qvl-replicas.XXXXXX")
else
  mkdir -p "$dir"
fi
dir=$(cd "$dir" && pwd)
mkdir -p "$dir/tmp"

pids=() alive=() nginx_pid=""
stopping=0
# Stop nginx, then every replica not yet reaped; a replica that does not exit 0 on SIGTERM
# (a crash, a sanitizer report) is named with its status.
cleanup() {
  stopping=1
  trap '' INT TERM
  local p rc waited=0
  [ -z "$nginx_pid" ] || kill -TERM "$nginx_pid" 2> /dev/null || true
  for p in "${alive[@]}"; do kill -TERM "$p" 2> /dev/null || true; done
  for p in $nginx_pid "${alive[@]}"; do
    while kill -0 "$p" 2> /dev/null && [ $waited -lt 300 ]; do sleep 0.1; waited=$((waited + 1)); done
    kill -KILL "$p" 2> /dev/null || true
    rc=0
    wait "$p" 2> /dev/null || rc=$?
    [ "$p" = "$nginx_pid" ] || [ $rc -eq 0 ] || say "replica pid $p stopped with status $rc"
  done
  if [ $keep_dir -eq 0 ]; then rm -rf "$dir"; fi
}
trap cleanup EXIT
trap 'exit 0' INT TERM

# The replicas: loopback only; nginx is the one address clients use. Every connection comes
# from nginx, so the per-address connection limit is off. nginx passes the client's Host on:
# a replica on loopback answers only loopback Host names (DNS rebinding), which is right while
# nginx listens on loopback too; when nginx listens on another address it was meant to be
# reached by any name, so the replicas accept any Host.
case "$host" in
  127.*|::1|localhost) host_args=() ;;
  *) host_args=(--allow-host '*') ;;
esac
for ((i = 0; i < replicas; i++)); do
  args=(serve -m "$model" --host 127.0.0.1 --port $((base_port + i)) --request-timeout "$request_timeout"
        --max-connections-per-ip 0 "${host_args[@]}")
  [ -z "$threads" ] || args+=(-t "$threads")
  args+=("${extra[@]}")
  cmd=("$qvl" "${args[@]}")
  [ ${#cpu_list[@]} -eq 0 ] || cmd=(taskset -c "${cpu_list[$i]}" "${cmd[@]}")
  if [ ${#gpu_list[@]} -gt 0 ]; then
    CUDA_VISIBLE_DEVICES="${gpu_list[$i]}" "${cmd[@]}" > "$dir/replica-$i.log" 2>&1 &
  else
    "${cmd[@]}" > "$dir/replica-$i.log" 2>&1 &
  fi
  pids+=($!)
  alive+=($!)
  say "replica $i: pid ${pids[$i]} at http://127.0.0.1:$((base_port + i)) (log $dir/replica-$i.log)"
done

# Wait until every replica has loaded its model (qvl serve says so on stderr) or failed.
for ((i = 0; i < replicas; i++)); do
  until grep -q "qvl serve: model loaded" "$dir/replica-$i.log"; do
    if ! kill -0 "${pids[$i]}" 2> /dev/null; then
      die "replica $i failed: $(grep -v '^$' "$dir/replica-$i.log" | tail -n 1)"
    fi
    sleep 0.1
  done
done

# nginx. Retrying a request at another replica (proxy_next_upstream) is safe for these
# failures: the replica could not be reached, closed the connection before answering, or
# answered 502/503/429 (nothing generated). non_idempotent allows it for POST: a chat
# completion changes nothing on the server. nginx never retries once it has passed a byte of
# the answer to the client, so a stream cut by a dying replica ends early instead.
listen="$host:$port"
[[ "$host" != *:* ]] || listen="[$host]:$port"
user_line=""
if [ "$(id -u)" -eq 0 ]; then
  # As root nginx's workers switch to an unprivileged user; they need the temp directory.
  group=$(id -gn nobody)
  user_line="user nobody $group;"
  chown nobody:"$group" "$dir/tmp"
  chmod 755 "$dir"
fi
read_timeout=$((request_timeout > 0 ? request_timeout + 60 : 86400))
{
  echo "# written by scripts/serve-replicas.sh"
  echo "$user_line"
  echo "worker_processes 1;"
  echo "pid $dir/nginx.pid;"
  echo "error_log $dir/nginx-error.log warn;"
  echo "daemon off;"
  echo "events { worker_connections 1024; }"
  echo "http {"
  echo "  access_log $dir/nginx-access.log;"
  for t in client_body proxy fastcgi uwsgi scgi; do echo "  ${t}_temp_path $dir/tmp/$t;"; done
  echo "  client_max_body_size 0;  # the replicas enforce --max-body (413)"
  echo "  upstream qvl_replicas {"
  echo "    least_conn;  # answers take seconds: send each request where fewest are running"
  for ((i = 0; i < replicas; i++)); do
    echo "    server 127.0.0.1:$((base_port + i)) max_fails=3 fail_timeout=10s;"
  done
  echo "    keepalive 32;"
  echo "  }"
  echo "  server {"
  echo "    listen $listen;"
  echo "    server_name localhost;"
  echo "    location / {"
  echo "      proxy_pass http://qvl_replicas;"
  echo "      proxy_http_version 1.1;"
  echo "      proxy_set_header Connection \"\";"
  # The client's Host name (without its port) goes on: the replicas check it (qvl serve
  # --allow-host). A client that sent none (HTTP/1.0) gets server_name's localhost instead.
  echo "      proxy_set_header Host \$host;"
  echo "      proxy_next_upstream error timeout http_502 http_503 http_429 non_idempotent;"
  echo "      proxy_next_upstream_tries $replicas;"
  echo "      proxy_connect_timeout 5s;"
  echo "      proxy_send_timeout ${read_timeout}s;"
  echo "      proxy_read_timeout ${read_timeout}s;"
  echo "      proxy_buffering off;  # Server-Sent Events pass through as they come"
  echo "    }"
  echo "  }"
  echo "}"
} > "$dir/nginx.conf"
"$nginx" -t -q -p "$dir" -e "$dir/nginx-error.log" -c "$dir/nginx.conf" ||
  die "nginx rejects $dir/nginx.conf ($(tail -n 1 "$dir/nginx-error.log" 2> /dev/null))"
"$nginx" -p "$dir" -e "$dir/nginx-error.log" -c "$dir/nginx.conf" &
nginx_pid=$!
for _ in $(seq 100); do
  [ -s "$dir/nginx.pid" ] && break
  kill -0 "$nginx_pid" 2> /dev/null || die "nginx did not start: $(tail -n 1 "$dir/nginx-error.log")"
  sleep 0.05
done
[ -s "$dir/nginx.pid" ] || die "nginx did not start: $(tail -n 1 "$dir/nginx-error.log")"
say "nginx: pid $nginx_pid at http://$listen (config $dir/nginx.conf)"
say "ready: $replicas replica(s) behind http://$listen"

# Report replicas that die; end when nginx does (or on a signal).
while [ $stopping -eq 0 ]; do
  kill -0 "$nginx_pid" 2> /dev/null || { say "nginx exited; stopping"; exit 1; }
  left=()
  for ((i = 0; i < ${#alive[@]}; i++)); do
    p=${alive[$i]}
    if kill -0 "$p" 2> /dev/null; then left+=("$p"); continue; fi
    rc=0
    wait "$p" 2> /dev/null || rc=$?
    say "replica pid $p exited (status $rc); nginx sends its requests to the others"
  done
  alive=("${left[@]}")
  sleep 0.5 &
  wait $! 2> /dev/null || true
done
