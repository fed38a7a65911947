use super::*;

const MS: Duration = Duration::from_millis(1);

fn route(last: u8) -> Route {
    Route {
        prefix: IpAddr::from([10, 71, 9, last]),
        next_hop: IpAddr::from([10, 71, 0, 1]),
        communities: vec![65000 << 16 | 100],
    }
}

fn vip(name: &str, last: u8, announce: Announce, eligible: bool) -> VipRouteInput {
    VipRouteInput {
        name: name.into(),
        route: route(last),
        announce,
        eligible,
        rise: 2000 * MS,
    }
}

fn healthy_world(vips: Vec<VipRouteInput>) -> Inputs {
    Inputs {
        dataplane_alive: true,
        generation_adopted: true,
        maintenance: false,
        vips,
    }
}

/// Decides, plans, and applies every op as if gobgpd said OK.
fn step(r: &mut Reconciler, i: &Inputs, now: Instant) -> (Vec<Verdict>, Vec<Op>) {
    let v = r.decide(i, now);
    let ops = r.plan(&v);
    for op in &ops {
        r.done(op);
    }
    (v, ops)
}

fn whys(v: &[Verdict]) -> Vec<Why> {
    v.iter().map(|v| v.why).collect()
}

#[test]
fn a_fresh_start_announces_every_wanted_vip_at_once() {
    let mut r = Reconciler::new([]);
    let i = healthy_world(vec![
        vip("web", 1, Announce::Healthy, true),
        vip("dns", 2, Announce::Always, false),
        vip("off", 3, Announce::Never, true),
        vip("empty", 4, Announce::Healthy, false),
    ]);
    let (v, ops) = step(&mut r, &i, Instant::now());
    assert_eq!(
        whys(&v),
        [
            Why::Announce,
            Why::Announce,
            Why::Never,
            Why::NoEligibleBackend
        ]
    );
    assert_eq!(ops, [Op::Add(route(1)), Op::Add(route(2))]);
    assert!(r.is_installed(&route(1)) && !r.is_installed(&route(3)));
}

#[test]
fn each_failure_withdraws_at_once_with_its_reason() {
    let t0 = Instant::now();
    type Change = fn(&mut Inputs);
    let cases: [(&str, Change, Why); 4] = [
        (
            "heartbeats stop",
            |i| i.dataplane_alive = false,
            Why::DataplaneDown,
        ),
        (
            "last eligible backend lost",
            |i| i.vips[0].eligible = false,
            Why::NoEligibleBackend,
        ),
        ("maintenance", |i| i.maintenance = true, Why::Maintenance),
        (
            "new generation not adopted",
            |i| i.generation_adopted = false,
            Why::GenerationNotAdopted,
        ),
    ];
    for (what, change, why) in cases {
        let mut r = Reconciler::new([]);
        let mut i = healthy_world(vec![vip("web", 1, Announce::Healthy, true)]);
        step(&mut r, &i, t0);
        change(&mut i);
        let (v, ops) = step(&mut r, &i, t0 + MS);
        assert_eq!(whys(&v), [why], "{what}");
        assert_eq!(ops, [Op::Delete(route(1))], "{what}");
        assert_eq!(shown(&v[0], false, true), (false, why.as_str()), "{what}");
    }
}

#[test]
fn always_ignores_backends_and_generations_but_not_the_dataplane_or_maintenance() {
    let mut i = healthy_world(vec![vip("dns", 2, Announce::Always, false)]);
    i.generation_adopted = false;
    let mut r = Reconciler::new([]);
    assert_eq!(whys(&r.decide(&i, Instant::now())), [Why::Announce]);
    i.maintenance = true;
    assert_eq!(whys(&r.decide(&i, Instant::now())), [Why::Maintenance]);
    i.dataplane_alive = false;
    assert_eq!(whys(&r.decide(&i, Instant::now())), [Why::DataplaneDown]);
}

#[test]
fn re_announcing_waits_for_rise_so_a_flap_does_not_reach_the_routers() {
    let t0 = Instant::now();
    let mut r = Reconciler::new([]);
    let mut i = healthy_world(vec![vip("web", 1, Announce::Healthy, true)]);
    step(&mut r, &i, t0);
    i.vips[0].eligible = false;
    step(&mut r, &i, t0 + 100 * MS);
    i.vips[0].eligible = true;
    let (v, ops) = step(&mut r, &i, t0 + 200 * MS);
    assert_eq!((whys(&v), ops), (vec![Why::Rising], vec![]));
    // Flaps down and back again: the clock starts over.
    i.vips[0].eligible = false;
    step(&mut r, &i, t0 + 1500 * MS);
    i.vips[0].eligible = true;
    let (v, _) = step(&mut r, &i, t0 + 2300 * MS);
    assert_eq!(whys(&v), [Why::Rising], "held 0.8 s of 2 s");
    let (v, ops) = step(&mut r, &i, t0 + 4300 * MS);
    assert_eq!(
        (whys(&v), ops),
        (vec![Why::Announce], vec![Op::Add(route(1))])
    );
    // Nothing more to do while it holds.
    let (_, ops) = step(&mut r, &i, t0 + 4500 * MS);
    assert!(ops.is_empty());
}

#[test]
fn a_removed_vip_is_withdrawn_and_a_shared_address_stays_while_anyone_wants_it() {
    let t0 = Instant::now();
    let mut r = Reconciler::new([]);
    let i = healthy_world(vec![
        vip("web", 1, Announce::Healthy, true),
        vip("web-tls", 1, Announce::Healthy, false),
        vip("old", 5, Announce::Healthy, true),
    ]);
    let (_, ops) = step(&mut r, &i, t0);
    assert_eq!(
        ops,
        [Op::Add(route(1)), Op::Add(route(5))],
        "one route per address"
    );
    let i = healthy_world(vec![
        vip("web", 1, Announce::Healthy, true),
        vip("web-tls", 1, Announce::Healthy, false),
    ]);
    let (_, ops) = step(&mut r, &i, t0 + MS);
    assert_eq!(ops, [Op::Delete(route(5))]);
}

#[test]
fn a_lost_gobgpd_gets_everything_again_and_stale_routes_deleted() {
    let t0 = Instant::now();
    // An earlier border-mgmt announced 7; the config no longer has it.
    let mut r = Reconciler::new([route(7)]);
    let i = healthy_world(vec![vip("web", 1, Announce::Healthy, true)]);
    let v = r.decide(&i, t0);
    let ops = r.plan(&v);
    assert_eq!(ops, [Op::Delete(route(7)), Op::Add(route(1))]);
    // The add fails (gobgpd gone): nothing is marked installed.
    r.done(&ops[0]);
    assert_eq!(
        shown(&v[0], r.is_installed(&route(1)), false),
        (false, "gobgpd unreachable")
    );
    r.lost_gobgpd();
    let (_, ops) = step(&mut r, &i, t0 + MS);
    assert_eq!(ops, [Op::Add(route(1))]);
    // gobgpd restarts: its table is empty; every wanted route goes again.
    r.lost_gobgpd();
    let (v, ops) = step(&mut r, &i, t0 + 2 * MS);
    assert_eq!(ops, [Op::Add(route(1))]);
    assert_eq!(
        shown(&v[0], r.is_installed(&route(1)), true),
        (true, "announced")
    );
}

#[test]
fn shutdown_withdraws_everything_known_or_possible() {
    let mut r = Reconciler::new([route(7)]);
    let i = healthy_world(vec![vip("web", 1, Announce::Healthy, true)]);
    let v = r.decide(&i, Instant::now());
    r.done(&Op::Add(route(1)));
    let _ = v;
    assert_eq!(
        r.withdraw_all(),
        [Op::Delete(route(1)), Op::Delete(route(7))]
    );
}
