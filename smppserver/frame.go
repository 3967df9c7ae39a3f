package smppserver

// MaxUnboundPDUSize bounds command_length before a session is bound
// (any bind fits in a few hundred bytes); MaxPDUSize applies after bind.
const MaxUnboundPDUSize = 1024
