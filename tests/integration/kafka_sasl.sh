#!/usr/bin/env bash
# A Kafka broker of the test's own that accepts only SASL_SSL (SCRAM-SHA-512
# over TLS) on free ports of 127.0.0.1, for test_transport; the broker's port
# is written to DIR/kafka/port at start. Certificates come from
# tls_ca.sh in DIR (PEM keystore and truststore); the users are created at
# storage format time: "admin" (the broker itself) and "sandtrail" whose
# password is in DIR/kafka.password.
#   kafka_sasl.sh DIR start    start it, wait until it answers over SASL_SSL
#   kafka_sasl.sh DIR stop     stop it (and remove nothing)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$1
libs=${SANDTRAIL_HOME:-$root/.local}/kafka-libs
kd=$dir/kafka
alive() { [ -f "$kd/pid" ] && kill -0 "$(cat "$kd/pid")" 2>/dev/null; }

case $2 in
stop)
    if alive; then
        kill "$(cat "$kd/pid")"
        for _ in $(seq 1 100); do alive || exit 0; sleep 0.2; done
        kill -9 "$(cat "$kd/pid")" 2>/dev/null || true
    fi
    exit 0
    ;;
start) ;;
*) echo "usage: kafka_sasl.sh DIR start|stop" >&2; exit 64 ;;
esac

mkdir -p "$kd/data"
read -r port ctl < <(python3 "$root/tests/integration/free_port.py" 2)
echo "$port" >"$kd/port"
[ -s "$dir/kafka.password" ] || echo "sandtrail-$RANDOM$RANDOM" >"$dir/kafka.password"
admin_pw=admin-$RANDOM$RANDOM
cat >"$kd/server.properties" <<P
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$ctl
listeners=SASL_SSL://127.0.0.1:$port,CONTROLLER://127.0.0.1:$ctl
advertised.listeners=SASL_SSL://127.0.0.1:$port
listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$admin_pw";
ssl.keystore.type=PEM
ssl.keystore.location=$dir/server.pem
ssl.truststore.type=PEM
ssl.truststore.location=$dir/ca.crt
ssl.client.auth=none
log.dirs=$kd/data
num.partitions=2
offsets.topic.replication.factor=1
offsets.topic.num.partitions=2
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
P
cat >"$kd/log4j.properties" <<P
log4j.rootLogger=WARN, file
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=$kd/server.log
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaServer=INFO
P
if [ ! -f "$kd/data/meta.properties" ]; then
    java -cp "$libs/*" -Dlog4j.configuration="file:$kd/log4j.properties" \
        kafka.tools.StorageTool format -t "$(java -cp "$libs/*" kafka.tools.StorageTool random-uuid 2>/dev/null)" \
        -c "$kd/server.properties" \
        --add-scram "SCRAM-SHA-512=[name=admin,password=$admin_pw]" \
        --add-scram "SCRAM-SHA-512=[name=sandtrail,password=$(cat "$dir/kafka.password")]" \
        >"$kd/format.log" 2>&1 || { cat "$kd/format.log" >&2; exit 1; }
fi
nohup java -Xms128m -Xmx384m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
    -Dlog4j.configuration="file:$kd/log4j.properties" \
    -cp "$libs/*" kafka.Kafka "$kd/server.properties" >"$kd/stdout.log" 2>&1 </dev/null &
echo $! >"$kd/pid"
kcat_conf=(-X security.protocol=SASL_SSL -X sasl.mechanisms=SCRAM-SHA-512 -X sasl.username=sandtrail
    -X "sasl.password=$(cat "$dir/kafka.password")" -X "ssl.ca.location=$dir/ca.crt")
for _ in $(seq 1 180); do
    kcat -b 127.0.0.1:$port "${kcat_conf[@]}" -L -m 2 >/dev/null 2>&1 && exit 0
    alive || break
    sleep 0.5
done
echo "kafka_sasl: the broker did not answer over SASL_SSL; its log:" >&2
tail -n 30 "$kd/server.log" "$kd/stdout.log" >&2 || true
exit 1
