//! Every command's argument parsing, one module per command (`locksmith sim`'s included):
//! each turns its arguments into the options of a library module (`nemesis::run`,
//! `nemesis::sim`, `nemesis::store::serve`, ...), which holds the behaviour.

pub mod bench;
pub mod check;
pub mod client;
pub mod hosts;
pub mod model;
pub mod node;
pub mod replay;
pub mod serve;
pub mod sim;
pub mod soak;
pub mod test;
