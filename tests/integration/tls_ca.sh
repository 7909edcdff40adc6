#!/usr/bin/env bash
# A throwaway certificate authority for the transport tests (test_transport):
#   tls_ca.sh DIR
# writes into DIR:
#   ca.crt          the CA that signs server.crt (clients trust it)
#   server.key      PKCS#8 key, unencrypted; server.crt for 127.0.0.1 and
#                   localhost; server.pem = key + certificate (Kafka's PEM
#                   keystore)
#   other-ca.crt    a second CA that signed nothing here: trusting it instead
#                   of ca.crt must make every client fail
# Keys are 2048-bit RSA, valid for a day. Nothing is read from or written
# outside DIR.
set -euo pipefail
dir=$1
mkdir -p "$dir"
cd "$dir"
ssl() { openssl "$@" 2>/dev/null; }

for ca in ca other-ca; do
    ssl req -x509 -newkey rsa:2048 -nodes -days 1 -keyout "$ca.key" -out "$ca.crt" \
        -subj "/CN=sandtrail test $ca" \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
done
ssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out server.key
ssl req -new -key server.key -subj "/CN=localhost" -out server.csr
printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" \
    "basicConstraints=CA:FALSE" "keyUsage=digitalSignature,keyEncipherment" \
    "extendedKeyUsage=serverAuth,clientAuth" >server.ext
ssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 \
    -extfile server.ext -out server.crt
cat server.key server.crt >server.pem
chmod 600 ./*.key server.pem
