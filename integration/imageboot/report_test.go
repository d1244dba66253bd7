package imageboot

import (
	"reflect"
	"testing"
)

func TestUnitTimes(t *testing.T) {
	serial := "[  OK  ] Started foo.\r\n" +
		"harmony-boot-report: unit systemd:Generators 3200000 4100000\r\n" +
		"harmony-boot-report: unit harmony-network.service 5100000 5350000\r\n" +
		"noise harmony-boot-report: unit containerd.service 6000000 0\r\n" +
		"harmony-boot-report: unit harmony-agent.service 9000000 17250000\n"
	want := []UnitTime{
		{"systemd:Generators", 3.2, 4.1},
		{"harmony-network.service", 5.1, 5.35},
		{"containerd.service", 6, 0},
		{"harmony-agent.service", 9, 17.25},
	}
	if got := UnitTimes(serial); !reflect.DeepEqual(got, want) {
		t.Errorf("UnitTimes: %+v, want %+v", got, want)
	}
}
