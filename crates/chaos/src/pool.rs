//! Cases side by side: a fixed set of workers, each with its own state (for the lab, a fault
//! key of its own), takes the next case from a shared list. Every case still has a world of its
//! own (a fresh simulator, HOME and cluster dir), so only the wall time changes. Results come
//! back in the list's order; the first error stops the workers from taking more cases.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// How many cases run at once unless `--jobs` says otherwise: the cases mostly wait (for a
/// pod, for Slurm, for a timeout; a Volcano case keeps about a fifth of a core busy), so twice
/// the cores, at most 4 (the Slurm lab has 4 CPUs for their jobs).
pub(crate) fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get() * 2).min(4)
}

/// Runs `each` over `items` on `workers` (one thread each); the results in `items`' order, and
/// the workers back.
pub(crate) fn run<T, W, R>(
    items: &[T],
    workers: Vec<W>,
    each: impl Fn(&mut W, &T) -> Result<R, String> + Sync,
) -> (Result<Vec<R>, String>, Vec<W>)
where
    T: Sync,
    W: Send,
    R: Send,
{
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let results: Mutex<Vec<(usize, R)>> = Mutex::new(Vec::with_capacity(items.len()));
    let first_error: Mutex<Option<String>> = Mutex::new(None);
    let workers = std::thread::scope(|scope| {
        let handles: Vec<_> = workers
            .into_iter()
            .map(|mut worker| {
                let (next, stop, results, first_error, each) = (&next, &stop, &results, &first_error, &each);
                scope.spawn(move || {
                    while !stop.load(Ordering::SeqCst) {
                        let i = next.fetch_add(1, Ordering::SeqCst);
                        let Some(item) = items.get(i) else { break };
                        match each(&mut worker, item) {
                            Ok(r) => results.lock().unwrap_or_else(|e| e.into_inner()).push((i, r)),
                            Err(e) => {
                                stop.store(true, Ordering::SeqCst);
                                first_error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                            }
                        }
                    }
                    worker
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return (Err(e), workers);
    }
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by_key(|(i, _)| *i);
    (Ok(results.into_iter().map(|(_, r)| r).collect()), workers)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn results_keep_the_order_of_the_cases_and_every_worker_comes_back() {
        let items: Vec<u64> = (0..20).collect();
        let (results, workers) = super::run(&items, vec![0usize; 3], |done, &i| {
            // Later cases finish first.
            std::thread::sleep(Duration::from_millis(20 - i));
            *done += 1;
            Ok(i * 10)
        });
        assert_eq!(results.unwrap(), (0..20).map(|i| i * 10).collect::<Vec<_>>());
        assert_eq!(workers.len(), 3);
        assert_eq!(workers.iter().sum::<usize>(), 20);
    }

    #[test]
    fn an_error_stops_the_workers_and_is_returned() {
        let items: Vec<u32> = (0..100).collect();
        let (results, workers) = super::run(&items, vec![0usize; 2], |done, &i| {
            *done += 1;
            if i == 5 { Err(format!("case {i} failed")) } else { Ok(i) }
        });
        assert_eq!(results.unwrap_err(), "case 5 failed");
        // Each worker finishes the case it holds and takes no more.
        assert!(workers.iter().sum::<usize>() < 100, "{workers:?}");
    }
}
