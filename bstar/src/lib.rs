//! Binary Star over zmtp.
