//! `locksmith`: the harness's command line.

fn main() {
    eprintln!("locksmith: no subcommands yet");
    std::process::exit(2);
}
