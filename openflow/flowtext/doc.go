// Package flowtext reads ovs-ofctl's flow syntax into openflow messages:
// ParseFlow, ParseMatchText, ParseActionText and ParseInstructionsText
// read what `ovs-ofctl -O OpenFlow15` reads and encode it to the bytes
// ovs-ofctl sends for it; what they cannot encode that way they refuse
// with an *UnsupportedError naming the part, rather than send something
// else. A test checks this on generated texts against ovs-ofctl and a
// real switch (differential_test.go). Printing is the messages' own
// String (package openflow), which ParseFlow reads back.
//
// ParseFlow reads:
//   - a leading command: add (the default), modify, modify_strict, delete,
//     delete_strict; cookie, table and the match in every command;
//     priority in adds, modifies and strict deletes; idle_timeout,
//     hard_timeout and the flags send_flow_rem, check_overlap,
//     reset_counts, no_packet_counts, no_byte_counts in adds and modifies;
//     importance in adds; out_port and out_group in deletes; actions in
//     adds and modifies. A cookie mask selects flows (not in adds); a
//     dump-flows line's statistics are skipped.
//   - numbers as ovs-ofctl reads them: in C's base 0 (0x-hex, 0-octal,
//     decimal) for field values and masks, priorities, timeouts, cookies,
//     groups, queues, meters, zones, conjunction ids and controller's
//     max_len; in base 10 for tables, ports, out_group, NAT ports,
//     conjunction clauses, prefix lengths and subfield bits; learn's
//     timeouts and priority and dec_ttl's ids in decimal digits (where
//     ovs-ofctl uses atoi).
//     Ports by reserved name in any case, or by number, OpenFlow 1.0's
//     reserved numbers (65280 to 65535) standing for OpenFlow 1.1's.
//   - match fields: in_port, in_port_oxm, actset_output, packet_type,
//     recirc_id, conj_id, metadata, dl_src/eth_src, dl_dst/eth_dst,
//     dl_type/eth_type, the 802.1Q keys dl_vlan, dl_vlan_pcp, vlan_pcp,
//     vlan_vid and vlan_tci (combined into one TCI, as in Open vSwitch),
//     mpls_label, mpls_tc, mpls_bos, nw_src/ip_src, nw_dst/ip_dst,
//     ipv6_src, ipv6_dst, ipv6_label, nw_proto/ip_proto, nw_tos, ip_dscp,
//     nw_ecn/ip_ecn, nw_ttl, nw_frag/ip_frag, tp_src, tp_dst, tcp_src,
//     tcp_dst, udp_src, udp_dst, sctp_src, sctp_dst, tcp_flags,
//     icmp_type, icmp_code, icmpv6_type, icmpv6_code, nd_target, nd_sll,
//     nd_tll, arp_op, arp_spa, arp_tpa, arp_sha, arp_tha, tun_id/tunnel_id,
//     tun_src, tun_dst, tun_ipv6_src, tun_ipv6_dst, pkt_mark, ct_state,
//     ct_zone, ct_mark, ct_label, ct_nw_src, ct_nw_dst, ct_ipv6_src,
//     ct_ipv6_dst, ct_nw_proto, ct_tp_src, ct_tp_dst, reg0-15, xreg0-7,
//     xxreg0-3; masks where the switch takes them; bits of a field by
//     subfield (reg0[0..15]=5, NXM_NX_REG0[8]=1); the protocol keywords
//     ip, ipv4, ipv6, ip6, icmp, icmp6, tcp, tcp6, udp, udp6, sctp,
//     sctp6, arp, rarp, mpls, mplsm.
//   - actions: output:PORT and bare ports, controller, controller:N,
//     controller(max_len=N), group, set_queue, meter (first), dec_ttl,
//     dec_ttl(ID,...), push_vlan (0x8100, 0x88a8), pop_vlan/strip_vlan,
//     set_field (masked too), load, move, mod_dl_src, mod_dl_dst,
//     mod_nw_src, mod_nw_dst, mod_tp_src and mod_tp_dst (the port of the
//     flow's protocol), resubmit in all its forms, ct with commit, force,
//     table, zone (a number or a 16-bit field), alg=ftp|tftp, nat(...) and
//     exec(...) in the order given, ct_clear, conjunction, note, clone,
//     exit, learn (table, the timeouts, priority, cookie, send_flow_rem,
//     delete_learned, match, load and output specs); then clear_actions,
//     write_actions(...), write_metadata and goto_table, in that order;
//     drop alone.
//
// It refuses, naming the part:
//   - actions, match fields and arguments it does not model: among them
//     multipath, bundle, bundle_load, sample, enqueue, mod_vlan_vid,
//     mod_vlan_pcp, mod_nw_tos, mod_nw_ecn, mod_nw_ttl, set_tunnel,
//     set_tunnel64, pop_queue, fin_timeout, check_pkt_larger, the MPLS,
//     NSH and encap actions, output to a field or with max_len,
//     controller's reason, id, userdata and pause, learn's limit and
//     result_dst (NXAST_LEARN2), tun_metadata, tun_flags, tun_gbp_*,
//     tun_erspan_*, dp_hash, mpls_ttl, the nd_reserved and nd_options
//     fields; NXM names as match keys (ovs-ofctl does too).
//   - a match field without its prerequisites, which ovs-ofctl would leave
//     out of what it sends (or send as the field sharing its storage):
//     nw_src without ip, tp_src without tcp, udp or sctp, tcp_flags
//     without tcp, icmp_type without icmp or icmp6, nd_target without an
//     ICMPv6 neighbor solicitation or advertisement of code 0, arp_op
//     above 255, MPLS fields without mpls, ct_nw_proto 0, ct_tp_src and
//     ct_tp_dst without ct_nw_proto, a VLAN priority partly masked or
//     without a VLAN, Ethernet fields with a non-Ethernet packet_type.
//   - a cookie without a mask in a modify (OpenFlow 1.5 cannot change a
//     cookie, ovs-ofctl leaves it out) or a delete; keys a command does
//     not take; a meter after other actions; instructions out of order or
//     twice; drop with anything else; a mask on a match field the switch
//     cannot mask; NAT with both hash and random; ct's force without
//     commit; resubmit with neither port nor table.
//   - values ovs-ofctl would silently cut to fit (nw_tos with its ECN
//     bits set, dl_vlan above 4095, a VLAN priority above 7, learn
//     timeouts and dec_ttl ids above 65535), and number forms it does not
//     read the way C does (signs, spaces, underscores, 0b and 0o).
//
// It does not check actions against the match (set_field to ip_src in a
// flow that does not match ip, pop_vlan without a VLAN): ovs-ofctl sends
// nothing for such flows, this package sends what they say, and the switch
// refuses them. Beyond ovs-ofctl's syntax it reads what it prints itself:
// raw(HEX) actions and oxm=HEX fields it does not model, ct alg=PORT,
// numeric nw_frag and tcp_flags with reserved bits, 32-bit port numbers
// Open vSwitch cannot hold, non-contiguous IPv6 masks, a masked set_field
// on a field a match cannot mask (ovs-ofctl prints one for a load into
// part of such a field), nat outside ct, a meter inside clone or
// write_actions, icmpv4_type, and NXM names in set_field.
//
// Like ovs-ofctl's, the text of a match does not say everything the
// switch holds: an explicit packet_type=(0,0) is not printed (it is sent
// when no field implies Ethernet), nor is the difference between an exact
// tcp_flags match and one masked with the 12 flag bits.
package flowtext
