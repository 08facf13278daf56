// A struct given to `aggregate` without implementing `AggregateFunction`.
use weir::prelude::*;

#[derive(Clone)]
struct Average;

fn main() {
    let env = StreamExecutionEnvironment::local();
    let _ = env
        .generate(10, |i| (i % 2, i))
        .key_by(|(k, _): &(u64, u64)| *k)
        .aggregate::<(u64, u64), f64, _>(Average);
}
