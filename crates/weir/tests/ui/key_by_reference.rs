// A key selector that returns a borrowed key.
use weir::prelude::*;

fn main() {
    let env = StreamExecutionEnvironment::local();
    let words = env.from_collection(vec!["a".to_string()]);
    let _ = words.key_by(|w: &String| w).count();
}
