package apiv1

// HeaderGuestHost names the Host that the server's own E2B gateway asks
// the port proxy to give the guest (E2B's network.maskRequestHost) on a
// request it sends in-process or that a peer node forwards. From anyone
// else it is ignored, and like every Airlock-* header it never reaches
// the guest.
const HeaderGuestHost = "Airlock-Guest-Host"
