//! `pfs pub` and `pfs sub` ([`packetfs::pubsub`]): the transport options
//! become a target or a listener here, results become lines and exit codes.

use packetfs::pubsub::{PubArgs, SubArgs, SubEvent, Subscriber};

use crate::args::TransportArgs;
use crate::exit;

pub fn publish(args: &PubArgs, t: &TransportArgs) -> anyhow::Result<i32> {
    t.check()?;
    let security = super::auth::client_security(&args.auth, &args.to, t.transport)?;
    let out = packetfs::pubsub::publish(args, &super::send::target(&args.to, t, 0), security.as_ref())?;
    match args.json {
        true => println!("{}", serde_json::to_string_pretty(&out.json())?),
        false => println!("{}", out.text()),
    }
    if out.report.digests_matched {
        return Ok(exit::OK);
    }
    eprintln!(
        "pfs: integrity MISMATCH in {} gram(s) at the subscriber",
        out.report.mismatched
    );
    Ok(exit::INTEGRITY)
}

pub fn subscribe(args: &SubArgs, t: &TransportArgs) -> anyhow::Result<i32> {
    t.check()?;
    let (admission, _) = super::auth::server_admission(&args.auth, &args.listen, t.transport)?;
    let mut sub = Subscriber::open(args, admission)?;
    let local = super::auth::local_users_only(&args.auth, &args.listen);
    let listener = packetfs::endpoint::bind(&args.listen, t, 0, local)?;
    // With --print stdout carries the messages: the rest goes to stderr.
    let say = |line: &str| match args.print {
        true => eprintln!("{line}"),
        false => super::serve::emit(line),
    };
    say(&super::serve::listening_line(&listener, args.json, "pfs sub"));
    let mut last = exit::OK;
    sub.serve(&listener, &mut |ev| {
        last = match &ev {
            SubEvent::Denied { .. } => exit::AUTH,
            SubEvent::Failed { error, .. } => exit::of_packetfs(error),
            SubEvent::Finished { report, .. } if !report.digests_matched => exit::INTEGRITY,
            SubEvent::Finished { .. } => exit::OK,
        };
        say(&ev.line(args.json));
    })?;
    Ok(if args.once || args.max_sessions.is_some() {
        last
    } else {
        exit::OK
    })
}
