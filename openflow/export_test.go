package openflow

// What the external tests of this package read of its internals.
const BatchChunk = batchChunk

var (
	ErrorCodeNames      = errorCodeNames
	NiciraErrorNames    = niciraErrorNames
	EachFlowEntryOfBody = eachFlowEntryOfBody
)

// AppendGroupDesc encodes a group description as a group dump carries it.
func AppendGroupDesc(g *GroupDesc, b []byte) ([]byte, error) { return g.appendTo(b) }
