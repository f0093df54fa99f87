package lima

import "github.com/lima-vm/lima/pkg/limayaml"

// realizedOf views a filled-in template as the realized config Lima would report.
func realizedOf(y *limayaml.LimaYAML) Realized {
	return Realized{
		Plain: y.Plain, MountType: y.MountType, Mounts: y.Mounts, PortForwards: y.PortForwards,
		Containerd: y.Containerd, SSH: y.SSH, Networks: y.Networks, CopyToHost: y.CopyToHost,
	}
}
