//! What the config names on this host, looked up there: the `ctl` socket's group.

/// The id of group `name`, as the host's name service knows it (/etc/group, or LDAP and the
/// like through NSS): `gateway check-config` asks the same question.
pub fn group_id(name: &str) -> anyhow::Result<u32> {
    match nix::unistd::Group::from_name(name) {
        Ok(Some(group)) => Ok(group.gid.as_raw()),
        Ok(None) => anyhow::bail!(
            "ctl.group: no group {name:?} on this host (getent group {name}); create it \
             (groupadd {name}) or omit ctl.group to leave the socket to root"
        ),
        Err(err) => Err(anyhow::anyhow!(
            "ctl.group: looking up group {name:?}: {err}"
        )),
    }
}
