package weir.bench;

import java.util.concurrent.locks.LockSupport;
import org.apache.flink.table.functions.FunctionContext;
import org.apache.flink.table.functions.ScalarFunction;

/**
 * Passes its first argument through at most {@code perSecond} rows per second per subtask:
 * the throttled stage of weir-backpressure-bench (bench/src/bin/weir-backpressure-bench.rs),
 * the same pacing as Weir's side (a deadline per row, a sleep when ahead by a millisecond).
 */
public class Throttle extends ScalarFunction {
    private long next;

    @Override
    public void open(FunctionContext context) {
        next = System.nanoTime();
    }

    public Long eval(Long value, Long perSecond) {
        next += 1_000_000_000L / Math.max(1L, perSecond == null ? 1L : perSecond);
        long ahead = next - System.nanoTime();
        if (ahead > 1_000_000L) {
            LockSupport.parkNanos(ahead);
        }
        return value;
    }

    @Override
    public boolean isDeterministic() {
        return false;
    }
}
