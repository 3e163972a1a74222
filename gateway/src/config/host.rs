//! What the config names on this host, looked up there: the `ctl` socket's group.

/// A name the config gives that this host does not know.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(
        "ctl.group: no group {name:?} on this host (getent group {name}); create it \
         (groupadd {name}) or omit ctl.group to leave the socket to root"
    )]
    NoGroup { name: String },
    #[error("ctl.group: looking up group {name:?}: {errno}")]
    GroupLookup {
        name: String,
        errno: nix::errno::Errno,
    },
}

/// The id of group `name`, as the host's name service knows it (/etc/group, or LDAP and the
/// like through NSS): `gateway check-config` asks the same question.
pub fn group_id(name: &str) -> Result<u32, HostError> {
    match nix::unistd::Group::from_name(name) {
        Ok(Some(group)) => Ok(group.gid.as_raw()),
        Ok(None) => Err(HostError::NoGroup {
            name: name.to_string(),
        }),
        Err(errno) => Err(HostError::GroupLookup {
            name: name.to_string(),
            errno,
        }),
    }
}
