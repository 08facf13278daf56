// Something that is not a sink given to `sink_to`.
use weir::prelude::*;

fn main() {
    let env = StreamExecutionEnvironment::local();
    env.generate(10, |i| i).sink_to("out/", "files");
}
