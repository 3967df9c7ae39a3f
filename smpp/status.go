package smpp

import "fmt"

// Status is an SMPP command_status.
type Status uint32

// The statuses the proxy itself produces or interprets.
const (
	StatusOK              Status = 0x00000000
	StatusInvMsgLen       Status = 0x00000001
	StatusInvCmdLen       Status = 0x00000002
	StatusInvCmdID        Status = 0x00000003
	StatusInvBndSts       Status = 0x00000004
	StatusAlyBnd          Status = 0x00000005
	StatusSysErr          Status = 0x00000008
	StatusInvSrcAdr       Status = 0x0000000A
	StatusInvDstAdr       Status = 0x0000000B
	StatusInvMsgID        Status = 0x0000000C
	StatusBindFail        Status = 0x0000000D
	StatusInvPaswd        Status = 0x0000000E
	StatusInvSysID        Status = 0x0000000F
	StatusMsgQFul         Status = 0x00000014
	StatusInvEsmClass     Status = 0x00000043
	StatusSubmitFail      Status = 0x00000045
	StatusThrottled       Status = 0x00000058
	StatusInvExpiry       Status = 0x00000062
	StatusXTAppn          Status = 0x00000064
	StatusXPAppn          Status = 0x00000065
	StatusInvOptParStream Status = 0x000000C0
	StatusOptParNotAllwd  Status = 0x000000C1
	StatusInvParLen       Status = 0x000000C2
	StatusMissingTLV      Status = 0x000000C3
	StatusInvTLVVal       Status = 0x000000C4
	StatusDeliveryFailure Status = 0x000000FE
	StatusUnknownErr      Status = 0x000000FF
	// StatusKeyConflict is the proxy's default conflict_status: the
	// idempotency key was reused for other content (vendor range).
	StatusKeyConflict Status = 0x00000400
)

type statusInfo struct {
	name string
	// temporary: the upstream did not accept the message but a later
	// attempt may succeed (SPEC §3.5).
	temporary bool
}

var statusTable = map[Status]statusInfo{
	StatusOK:              {"ESME_ROK", false},
	StatusInvMsgLen:       {"ESME_RINVMSGLEN", false},
	StatusInvCmdLen:       {"ESME_RINVCMDLEN", false},
	StatusInvCmdID:        {"ESME_RINVCMDID", false},
	StatusInvBndSts:       {"ESME_RINVBNDSTS", false},
	StatusAlyBnd:          {"ESME_RALYBND", false},
	StatusSysErr:          {"ESME_RSYSERR", true},
	StatusInvSrcAdr:       {"ESME_RINVSRCADR", false},
	StatusInvDstAdr:       {"ESME_RINVDSTADR", false},
	StatusInvMsgID:        {"ESME_RINVMSGID", false},
	StatusBindFail:        {"ESME_RBINDFAIL", false},
	StatusInvPaswd:        {"ESME_RINVPASWD", false},
	StatusInvSysID:        {"ESME_RINVSYSID", false},
	StatusMsgQFul:         {"ESME_RMSGQFUL", true},
	StatusInvEsmClass:     {"ESME_RINVESMCLASS", false},
	StatusSubmitFail:      {"ESME_RSUBMITFAIL", false},
	StatusThrottled:       {"ESME_RTHROTTLED", true},
	StatusInvExpiry:       {"ESME_RINVEXPIRY", false},
	StatusXTAppn:          {"ESME_RX_T_APPN", true},
	StatusXPAppn:          {"ESME_RX_P_APPN", false},
	StatusInvOptParStream: {"ESME_RINVOPTPARSTREAM", false},
	StatusOptParNotAllwd:  {"ESME_ROPTPARNOTALLWD", false},
	StatusInvParLen:       {"ESME_RINVPARLEN", false},
	StatusMissingTLV:      {"ESME_RMISSINGTLV", false},
	StatusInvTLVVal:       {"ESME_RINVTLVVAL", false},
	StatusDeliveryFailure: {"ESME_RDELIVERYFAILURE", false},
	StatusUnknownErr:      {"ESME_RUNKNOWNERR", false},
	StatusKeyConflict:     {"SMPPPROXY_KEY_CONFLICT", false},
}

// String returns the SMPP name of the status, or its hex value.
func (s Status) String() string {
	if i, ok := statusTable[s]; ok {
		return i.name
	}
	return fmt.Sprintf("0x%08X", uint32(s))
}

// Temporary reports whether an upstream answering s did not accept the
// message but a later attempt may succeed: 0x08, 0x14, 0x58 and 0x64.
// Everything else but 0 is a permanent rejection.
func (s Status) Temporary() bool { return statusTable[s].temporary }

// Error lets a Status travel as an error; compare with errors.As.
func (s Status) Error() string { return "smpp: status " + s.String() }

// Known reports whether s is in the status table, so that String names it
// (metric labels use the name of a known status and "other" for the rest).
func (s Status) Known() bool {
	_, ok := statusTable[s]
	return ok
}
