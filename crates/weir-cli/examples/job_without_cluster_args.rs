//! A job binary that does not follow the job template: it neither flattens
//! `weir_cluster::ClusterArgs` nor calls `weir_cluster::apply`. `weir run` cannot hand it
//! its settings or follow it, and the job says so instead of ignoring them (the CLI's tests
//! run it).

use weir::prelude::*;

fn main() -> std::process::ExitCode {
    weir::cli::exit_code(run())
}

fn run() -> Result<(), WeirError> {
    weir::cli::init_logging();
    let env = StreamExecutionEnvironment::new(ExecutionConfig::default().with_parallelism(1))?;
    env.generate(10, |i| i).sink_to(DiscardingSink, "discard");
    let result = env.execute("without cluster args")?;
    print!("{result}");
    Ok(())
}
