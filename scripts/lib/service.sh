# Helpers shared by the scripts that install and run the test services (sourced, not run).

log() { printf '%s\n' "$*" >&2; }

# Whether the process whose pid is in file $1 runs.
pid_running() {
    [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

# Whether something listens on 127.0.0.1:$1.
listening() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# A free TCP port on 127.0.0.1.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# A test CA (ca.crt), a second CA nothing trusts (untrusted-ca.crt) and a server certificate
# for 127.0.0.1 and localhost signed by the first (server.crt, server.key), made once in $1;
# and client certificates for mutual TLS, one signed by each CA (client.crt and
# client.key; stranger.crt and stranger.key), made once beside them from the same CAs, so
# that brokers already running with the server certificate stay valid.
make_test_certificates() {
    local dir="$1"
    if ! [ -f "$dir/server.crt" ] || ! [ -f "$dir/untrusted-ca.crt" ]; then
        mkdir -p "$dir"
        for ca in ca untrusted-ca; do
            openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=Weir test $ca" \
                -keyout "$dir/$ca.key" -out "$dir/$ca.crt" 2>/dev/null
        done
        openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
            -keyout "$dir/server.key" -out "$dir/server.csr" 2>/dev/null
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n' >"$dir/server.ext"
        openssl x509 -req -in "$dir/server.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
            -CAcreateserial -days 3650 -extfile "$dir/server.ext" -out "$dir/server.crt" 2>/dev/null
        rm -f "$dir/client.crt" "$dir/stranger.crt"
    fi
    if ! [ -f "$dir/client.crt" ] || ! [ -f "$dir/stranger.crt" ]; then
        printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n' >"$dir/client.ext"
        local client ca
        for client in client:ca stranger:untrusted-ca; do
            ca="${client#*:}"
            client="${client%%:*}"
            openssl req -newkey rsa:2048 -nodes -subj "/CN=weir-test-$client" \
                -keyout "$dir/$client.key" -out "$dir/$client.csr" 2>/dev/null
            openssl x509 -req -in "$dir/$client.csr" -CA "$dir/$ca.crt" -CAkey "$dir/$ca.key" \
                -CAcreateserial -days 3650 -extfile "$dir/client.ext" -out "$dir/$client.crt" 2>/dev/null
        done
    fi
    chmod 600 "$dir"/*.key
    chmod 644 "$dir"/*.crt
}
