//! Clustered Hashmap Protocol (12/CHP) over zmtp.
