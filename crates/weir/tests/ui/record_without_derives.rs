// A record type that cannot cross a channel or be checkpointed.
use weir::prelude::*;

#[derive(Clone)]
struct Click {
    page: u32,
}

fn main() {
    let env = StreamExecutionEnvironment::local();
    let _ = env.generate(10, |i| Click { page: i as u32 }).collect();
}
