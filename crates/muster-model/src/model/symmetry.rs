//! Worker symmetry: the renamings of workers that [`LeaseModel::canonical`](super::LeaseModel::canonical) compares.

use crate::state::{Request, State, Worker, WorkerNo};

/// Every renaming `perm` (worker `w` becomes `perm[w]`) that sorts `workers`.
pub(super) fn sorting_permutations(workers: &[Worker]) -> Vec<Vec<WorkerNo>> {
    let n = workers.len();
    let mut by_state: Vec<usize> = (0..n).collect();
    by_state.sort_by_key(|w| workers[*w]);
    if by_state.windows(2).all(|p| workers[p[0]] != workers[p[1]]) {
        // No ties (the common case): one renaming sorts them.
        let mut perm = vec![0; n];
        for (k, w) in by_state.into_iter().enumerate() {
            perm[w] = WorkerNo::try_from(k).expect("at most 255 workers");
        }
        return vec![perm];
    }
    // Positions of the sorted order, grouped by equal worker state.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for k in 0..n {
        match groups.last_mut() {
            Some(g) if workers[by_state[g[0]]] == workers[by_state[k]] => g.push(k),
            _ => groups.push(vec![k]),
        }
    }
    // Within a group any order of its workers is sorted: take every combination.
    let mut orders: Vec<Vec<usize>> = vec![Vec::new()];
    for g in &groups {
        let members: Vec<usize> = g.iter().map(|k| by_state[*k]).collect();
        let mut next = Vec::new();
        for prefix in &orders {
            for arrangement in arrangements(&members) {
                let mut o = prefix.clone();
                o.extend(arrangement);
                next.push(o);
            }
        }
        orders = next;
    }
    orders
        .into_iter()
        .map(|order| {
            // order[k] is the worker that goes to position k.
            let mut perm = vec![0; n];
            for (k, w) in order.into_iter().enumerate() {
                perm[w] = WorkerNo::try_from(k).expect("at most 255 workers");
            }
            perm
        })
        .collect()
}

/// Every ordering of `items`.
fn arrangements(items: &[usize]) -> Vec<Vec<usize>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    for (i, first) in items.iter().enumerate() {
        let mut rest = items.to_vec();
        rest.remove(i);
        for mut tail in arrangements(&rest) {
            tail.insert(0, *first);
            out.push(tail);
        }
    }
    out
}

/// `s` with worker `w` renamed to `perm[w]` everywhere.
pub(super) fn rename_workers(s: &State, perm: &[WorkerNo]) -> State {
    let to = |w: WorkerNo| perm[usize::from(w)];
    let mut t = s.clone();
    for item in &mut t.items {
        if let Some(g) = item.lease.as_mut() {
            g.worker = to(g.worker);
        }
    }
    for lease in &mut t.leases {
        lease.worker = to(lease.worker);
    }
    for (w, worker) in s.workers.iter().enumerate() {
        t.workers[usize::from(perm[w])] = *worker;
    }
    t.requests = s
        .requests
        .iter()
        .map(|r| match *r {
            Request::Lease { worker } => Request::Lease { worker: to(worker) },
            Request::Heartbeat { worker, lease } => Request::Heartbeat {
                worker: to(worker),
                lease,
            },
            Request::Finish {
                worker,
                lease,
                finish,
            } => Request::Finish {
                worker: to(worker),
                lease,
                finish,
            },
        })
        .collect();
    t
}
