//! Paranoid Pirate Protocol (6/PPP) over zmtp.
