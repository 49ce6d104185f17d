use checker::model::reduce::permuted;
fn representative(s: LockdState) -> LockdState { let mut best: Option<(u64, LockdState)> = None; for p in [[0,1,2],[0,2,1],[1,0,2],[1,2,0],[2,0,1],[2,1,0]] { let keys: Vec<usize> = (0..s.actor_states.len()).map(|i| if i < 3 { p[i] } else { i }).collect(); let q = permuted(s.clone(), &keys); let f = fp(&q); if best.as_ref().is_none_or(|(b, _)| f < *b) { best = Some((f, q)); } } best.unwrap().1 }
use checker::model::{LockdState, ModelConfig};
use std::collections::BTreeSet;
use stateright::Model;
use std::hash::{Hash, Hasher};

fn fp(s: &LockdState) -> u64 { let mut h = std::collections::hash_map::DefaultHasher::new(); s.hash(&mut h); h.finish() }

#[test]
fn probe() {
    let mut cfg = ModelConfig::default();
    cfg.symmetry = false;
    let model = cfg.into_model();
    for seed in 0..200u64 {
    let mut state = model.init_states().remove(0);
    let mut rng = seed;
    for step in 0..60 {
        let rep = representative(state.clone());
        let mut a1 = Vec::new(); model.actions(&state, &mut a1);
        let mut a2 = Vec::new(); model.actions(&rep, &mut a2);
        let s1: BTreeSet<u64> = a1.iter().filter_map(|a| model.next_state(&state, a.clone())).filter(|n| model.within_boundary(n)).map(|n| fp(&representative(n))).collect();
        let s2: BTreeSet<u64> = a2.iter().filter_map(|a| model.next_state(&rep, a.clone())).filter(|n| model.within_boundary(n)).map(|n| fp(&representative(n))).collect();
        if s1 != s2 {
            println!("step {step}: differ: {} vs {} (common {})", s1.len(), s2.len(), s1.intersection(&s2).count());
            for a in &a1 { if let Some(n) = model.next_state(&state, a.clone()) { if !s2.contains(&fp(&representative(n.clone()))) { println!("ACTION {:?}", a); println!("NEXT-REP {:#?}", representative(n)); } } }
            for a in &a2 { if let Some(n) = model.next_state(&rep, a.clone()) { if !s1.contains(&fp(&representative(n.clone()))) { println!("ACTION2 {:?}", a); println!("NEXT-REP2 {:#?}", representative(n)); } } }
            panic!();
        }
        let succ: Vec<_> = a1.into_iter().filter_map(|a| model.next_state(&state, a)).filter(|n| model.within_boundary(n)).collect();
        if succ.is_empty() { break; }
        rng = lockd::rng::splitmix64(&mut rng);
        state = succ[(rng as usize) % succ.len()].clone();
    }
    }
}
