// A struct given to `process` without implementing `ProcessFunction`.
use weir::prelude::*;

#[derive(Clone)]
struct Doubler;

fn main() {
    let env = StreamExecutionEnvironment::local();
    let _ = env.generate(10, |i| i).process::<u64, _>(Doubler);
}
