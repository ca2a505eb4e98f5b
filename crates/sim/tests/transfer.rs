//! Scenario tests of the sans-I/O core in virtual time.
use ixora_sim::*;

#[test]
fn clean_link_small() {
    let r = Transfer::new(TransferConfig {
        bytes: 200_000,
        ..Default::default()
    })
    .run();
    println!("{}", serde_json_like(&r));
    assert!(r.intact && r.clean_close, "{r:?}");
}

fn serde_json_like(r: &TransferReport) -> String {
    format!("{r:?}")
}
