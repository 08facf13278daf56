//! CPU time and peak memory of this process, and how busy the machine is, from the kernel.

use std::time::Duration;

/// CPU time and peak resident memory of a process so far.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessUsage {
    /// User plus system CPU seconds of all its threads.
    pub cpu_seconds: f64,
    /// Peak resident set size in MiB (the kernel's high-water mark).
    pub peak_rss_mib: f64,
}

/// This process's usage so far (`getrusage(RUSAGE_SELF)`).
pub fn current() -> ProcessUsage {
    // SAFETY: getrusage only writes the struct it is given; a zeroed rusage is valid.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return ProcessUsage {
            cpu_seconds: f64::NAN,
            peak_rss_mib: f64::NAN,
        };
    }
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    ProcessUsage {
        cpu_seconds: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        // VmHWM, not ru_maxrss: Linux carries ru_maxrss over an exec from the process that
        // forked, so a run started by a suite process holding 200 MB reported 200 MB.
        // VmHWM starts afresh with the new program. Both are in KiB.
        peak_rss_mib: vm_hwm_kib().unwrap_or(usage.ru_maxrss as f64) / 1024.0,
    }
}

/// This process's peak resident set since its program started (`VmHWM`), KiB.
fn vm_hwm_kib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// Busy and total jiffies of all cores, from the first line of `/proc/stat`.
fn cpu_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_cpu_line(stat.lines().next()?)
}

/// Parses `cpu  user nice system idle iowait irq softirq steal ...` into (busy, total).
pub fn parse_cpu_line(line: &str) -> Option<(u64, u64)> {
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    if fields.len() < 5 {
        return None;
    }
    let total: u64 = fields.iter().sum();
    Some((total - fields[3] - fields[4], total))
}

/// The fraction of the machine's CPU (all cores) that was busy over `window`: what other
/// processes are taking before a run, so noisy figures can be spotted. `None` off Linux.
pub fn machine_busy_fraction(window: Duration) -> Option<f64> {
    let (busy0, total0) = cpu_jiffies()?;
    std::thread::sleep(window);
    let (busy1, total1) = cpu_jiffies()?;
    let total = total1.saturating_sub(total0);
    (total > 0).then(|| busy1.saturating_sub(busy0) as f64 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_line_separates_idle_and_iowait_from_busy() {
        assert_eq!(
            parse_cpu_line("cpu  100 5 50 1000 20 1 2 3 0 0"),
            Some((161, 1181))
        );
        assert_eq!(parse_cpu_line("cpu 1 2"), None);
        assert_eq!(parse_cpu_line("cpu a b c d e"), None);
    }

    #[test]
    fn own_usage_grows_with_work() {
        let before = current();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let after = current();
        assert!(
            after.cpu_seconds > before.cpu_seconds,
            "{before:?} {after:?}"
        );
        assert!(after.peak_rss_mib > 0.0);
    }
}
