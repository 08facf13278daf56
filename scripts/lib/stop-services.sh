# Stops the test services whose start printed WEIR_*_STARTED=1 into this shell, by PID
# (sourced by test.sh and soak.sh, so that a caller's own services stay up).
stop_started_services() {
    if [ "${WEIR_KAFKA_BROKER_STARTED:-}" = 1 ]; then scripts/kafka-broker.sh stop plain; fi
    if [ "${WEIR_KAFKA_TLS_STARTED:-}" = 1 ]; then scripts/kafka-broker.sh stop tls; fi
    if [ "${WEIR_KAFKA_SASL_STARTED:-}" = 1 ]; then scripts/kafka-broker.sh stop sasl; fi
    if [ "${WEIR_POSTGRES_MAIN_STARTED:-}" = 1 ] || [ "${WEIR_POSTGRES_NO2PC_STARTED:-}" = 1 ] ||
        [ "${WEIR_POSTGRES_TLS_STARTED:-}" = 1 ]; then
        scripts/postgres.sh stop
    fi
    if [ "${WEIR_S3_SERVER_STARTED:-}" = 1 ]; then scripts/s3-server.sh stop; fi
}
