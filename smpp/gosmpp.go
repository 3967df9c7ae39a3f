package smpp

import "github.com/linxGnu/gosmpp/data"

func gosmppCmd(id uint32) data.CommandIDType { return data.CommandIDType(int32(id)) }
