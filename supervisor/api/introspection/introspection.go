package introspection

import "strings"

// The introspection XML served for the manager and for each sandbox. The
// same text is shipped as contrib/dbus/org.sandboxd1.Manager.xml and
// org.sandboxd1.Sandbox.xml; a test compares what the daemon serves with
// those files byte for byte, and these interfaces with the Go methods that
// implement them, so neither can drift.

// ManagerXML is what Introspect answers on /org/sandboxd1.
const ManagerXML = xmlHeader + `<node>
 <interface name="org.sandboxd1.Manager">
  <method name="CreateSandbox">
   <arg type="s" name="project" direction="in"/>
   <arg type="a{sv}" name="options" direction="in"/>
   <arg type="s" name="id" direction="out"/>
   <arg type="o" name="object" direction="out"/>
  </method>
  <method name="ListSandboxes">
   <arg type="a(ssssuto)" name="sandboxes" direction="out"/>
  </method>
  <method name="GetSandbox">
   <arg type="s" name="id" direction="in"/>
   <arg type="o" name="object" direction="out"/>
  </method>
  <method name="FindSandbox">
   <arg type="s" name="sandbox" direction="in"/>
   <arg type="(ssssuto)" name="entry" direction="out"/>
  </method>
  <method name="DestroySandbox">
   <arg type="s" name="id" direction="in"/>
  </method>
  <method name="ListProjects">
   <arg type="a(sss)" name="projects" direction="out"/>
  </method>
  <method name="AddProject">
   <arg type="s" name="name" direction="in"/>
   <arg type="s" name="location" direction="in"/>
  </method>
  <method name="AddProjectWithOptions">
   <arg type="s" name="name" direction="in"/>
   <arg type="s" name="location" direction="in"/>
   <arg type="a{sv}" name="options" direction="in"/>
  </method>
  <method name="RemoveProject">
   <arg type="s" name="name" direction="in"/>
  </method>
  <method name="AdoptProject">
   <arg type="s" name="name" direction="in"/>
   <arg type="s" name="path" direction="in"/>
   <arg type="a{sv}" name="options" direction="in"/>
  </method>
  <method name="ReleaseProject">
   <arg type="s" name="name" direction="in"/>
  </method>
  <method name="Try">
   <arg type="s" name="project" direction="in"/>
   <arg type="as" name="variants" direction="in"/>
   <arg type="s" name="check" direction="in"/>
   <arg type="s" name="keep" direction="in"/>
   <arg type="a{sv}" name="options" direction="in"/>
   <arg type="s" name="report" direction="out"/>
  </method>
  <method name="ListPromotions">
   <arg type="a(ssssssut)" name="promotions" direction="out"/>
  </method>
  <method name="GetPromotion">
   <arg type="s" name="id" direction="in"/>
   <arg type="s" name="record" direction="out"/>
  </method>
  <method name="ApprovePromotion">
   <arg type="s" name="id" direction="in"/>
  </method>
  <method name="RejectPromotion">
   <arg type="s" name="id" direction="in"/>
   <arg type="s" name="reason" direction="in"/>
  </method>
  <method name="ApprovePromotionWithOptions">
   <arg type="s" name="id" direction="in"/>
   <arg type="a{sv}" name="options" direction="in"/>
  </method>
  <method name="PromotionDiff">
   <arg type="s" name="id" direction="in"/>
   <arg type="a{sv}" name="options" direction="in"/>
   <arg type="s" name="diff" direction="out"/>
   <arg type="s" name="digest" direction="out"/>
  </method>
  <method name="ClearCache"/>
  <method name="GetLimits">
   <arg type="(tttttttttttttt)" name="limits" direction="out"/>
  </method>
  <method name="ListPools">
   <arg type="s" name="pools" direction="out"/>
  </method>
  <signal name="SandboxNew">
   <arg type="s" name="id"/>
   <arg type="o" name="object"/>
  </signal>
  <signal name="SandboxRemoved">
   <arg type="s" name="id"/>
   <arg type="o" name="object"/>
  </signal>
  <signal name="StateChanged">
   <arg type="s" name="id"/>
   <arg type="s" name="state"/>
  </signal>
  <signal name="TryVariantDone">
   <arg type="s" name="try"/>
   <arg type="s" name="variant"/>
  </signal>
 </interface>
` + standardInterfacesXML + ` <node name="sandbox"/>
</node>
`

// SandboxXML is what Introspect answers on /org/sandboxd1/sandbox/<id>.
const SandboxXML = xmlHeader + `<node>
 <interface name="org.sandboxd1.Sandbox">
  <method name="Destroy"/>
  <method name="Freeze"/>
  <method name="Thaw"/>
  <method name="Stop"/>
  <method name="Start"/>
  <method name="Exec">
   <arg type="as" name="argv" direction="in"/>
   <arg type="a{sv}" name="options" direction="in"/>
   <arg type="h" name="stdin" direction="in"/>
   <arg type="h" name="stdout" direction="in"/>
   <arg type="h" name="stderr" direction="in"/>
   <arg type="s" name="command" direction="out"/>
  </method>
  <method name="ExecTerminal">
   <arg type="as" name="argv" direction="in"/>
   <arg type="a{sv}" name="options" direction="in"/>
   <arg type="q" name="rows" direction="in"/>
   <arg type="q" name="cols" direction="in"/>
   <arg type="s" name="command" direction="out"/>
   <arg type="h" name="terminal" direction="out"/>
  </method>
  <method name="Signal">
   <arg type="s" name="command" direction="in"/>
   <arg type="i" name="signal" direction="in"/>
  </method>
  <method name="Checkpoint">
   <arg type="s" name="name" direction="in"/>
   <arg type="t" name="created" direction="out"/>
  </method>
  <method name="ListCheckpoints">
   <arg type="a(stb)" name="checkpoints" direction="out"/>
  </method>
  <method name="DeleteCheckpoint">
   <arg type="s" name="name" direction="in"/>
  </method>
  <method name="Rollback">
   <arg type="s" name="name" direction="in"/>
  </method>
  <method name="Diff">
   <arg type="a(ssss)" name="changes" direction="out"/>
  </method>
  <method name="UnifiedDiff">
   <arg type="a{sv}" name="options" direction="in"/>
   <arg type="s" name="diff" direction="out"/>
  </method>
  <method name="DiffCounted">
   <arg type="a(ssss)" name="changes" direction="out"/>
   <arg type="u" name="ignored" direction="out"/>
  </method>
  <method name="Rebase"/>
  <method name="ProjectChanges">
   <arg type="as" name="paths" direction="out"/>
   <arg type="t" name="base" direction="out"/>
  </method>
  <method name="FileVersions">
   <arg type="s" name="path" direction="in"/>
   <arg type="a{sv}" name="options" direction="in"/>
   <arg type="a(sstbbays)" name="versions" direction="out"/>
  </method>
  <method name="Merge">
   <arg type="s" name="path" direction="in"/>
   <arg type="a{sv}" name="options" direction="in"/>
   <arg type="b" name="clean" direction="out"/>
   <arg type="b" name="written" direction="out"/>
   <arg type="a(uuuuuusss)" name="hunks" direction="out"/>
   <arg type="ay" name="merged" direction="out"/>
  </method>
  <method name="Fork">
   <arg type="a{sv}" name="options" direction="in"/>
   <arg type="as" name="ids" direction="out"/>
   <arg type="as" name="not_carried" direction="out"/>
  </method>
  <method name="Promote">
   <arg type="a{sv}" name="options" direction="in"/>
   <arg type="s" name="promotion" direction="out"/>
  </method>
  <method name="Spawn">
   <arg type="as" name="argv" direction="in"/>
   <arg type="a{sv}" name="options" direction="in"/>
   <arg type="s" name="process" direction="out"/>
  </method>
  <method name="SystemStatus">
   <arg type="s" name="state" direction="out"/>
   <arg type="as" name="failed" direction="out"/>
  </method>
  <method name="ListProcesses">
   <arg type="a(sasuttsii)" name="processes" direction="out"/>
  </method>
  <method name="ReadLog">
   <arg type="s" name="process" direction="in"/>
   <arg type="t" name="offset" direction="in"/>
   <arg type="u" name="max" direction="in"/>
   <arg type="ay" name="data" direction="out"/>
   <arg type="t" name="next" direction="out"/>
   <arg type="b" name="ended" direction="out"/>
  </method>
  <method name="SignalProcess">
   <arg type="s" name="process" direction="in"/>
   <arg type="i" name="signal" direction="in"/>
  </method>
  <method name="ExposePort">
   <arg type="q" name="port" direction="in"/>
   <arg type="a{sv}" name="options" direction="in"/>
   <arg type="s" name="address" direction="out"/>
  </method>
  <method name="ClosePort">
   <arg type="q" name="port" direction="in"/>
  </method>
  <method name="OpenSession">
   <arg type="s" name="language" direction="in"/>
   <arg type="a{sv}" name="options" direction="in"/>
   <arg type="s" name="session" direction="out"/>
  </method>
  <method name="Eval">
   <arg type="s" name="session" direction="in"/>
   <arg type="s" name="code" direction="in"/>
   <arg type="s" name="output" direction="out"/>
   <arg type="i" name="status" direction="out"/>
  </method>
  <method name="CloseSession">
   <arg type="s" name="session" direction="in"/>
  </method>
  <method name="ReadFile">
   <arg type="s" name="path" direction="in"/>
   <arg type="t" name="offset" direction="in"/>
   <arg type="t" name="max" direction="in"/>
   <arg type="ay" name="data" direction="out"/>
  </method>
  <method name="WriteFile">
   <arg type="s" name="path" direction="in"/>
   <arg type="ay" name="data" direction="in"/>
   <arg type="a{sv}" name="options" direction="in"/>
  </method>
  <method name="ListFiles">
   <arg type="s" name="path" direction="in"/>
   <arg type="a{sv}" name="options" direction="in"/>
   <arg type="a(ssuutts)" name="entries" direction="out"/>
  </method>
  <method name="EditFile">
   <arg type="s" name="path" direction="in"/>
   <arg type="s" name="old" direction="in"/>
   <arg type="s" name="new" direction="in"/>
   <arg type="u" name="replacements" direction="out"/>
  </method>
  <method name="ReadFileTo">
   <arg type="s" name="path" direction="in"/>
   <arg type="h" name="pipe" direction="in"/>
   <arg type="a{sv}" name="options" direction="in"/>
   <arg type="t" name="bytes" direction="out"/>
  </method>
  <method name="WriteFileFrom">
   <arg type="s" name="path" direction="in"/>
   <arg type="h" name="pipe" direction="in"/>
   <arg type="a{sv}" name="options" direction="in"/>
   <arg type="t" name="bytes" direction="out"/>
  </method>
  <signal name="CommandExited">
   <arg type="s" name="command"/>
   <arg type="s" name="how"/>
   <arg type="i" name="status"/>
   <arg type="i" name="signal"/>
  </signal>
  <signal name="ProcessExited">
   <arg type="s" name="process"/>
   <arg type="s" name="how"/>
   <arg type="i" name="status"/>
   <arg type="i" name="signal"/>
  </signal>
  <property name="Id" type="s" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
  </property>
  <property name="Name" type="s" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
  </property>
  <property name="Project" type="s" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
  </property>
  <property name="State" type="s" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="true"/>
  </property>
  <property name="Owner" type="u" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
  </property>
  <property name="Created" type="t" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
  </property>
  <property name="Expires" type="t" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
  </property>
  <property name="Path" type="s" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
  </property>
  <property name="Unit" type="s" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
  </property>
  <property name="Base" type="s" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
  </property>
  <property name="Profile" type="s" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
  </property>
  <property name="Limits" type="a{sv}" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
  </property>
  <property name="Network" type="s" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
  </property>
  <property name="Allow" type="as" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
  </property>
  <property name="ReadOnlyProject" type="b" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
  </property>
  <property name="Boot" type="b" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
  </property>
  <property name="HostIDs" type="au" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="const"/>
  </property>
  <property name="FrozenIdle" type="b" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="false"/>
  </property>
  <property name="Staleness" type="s" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="false"/>
  </property>
  <property name="Usage" type="a{sv}" access="read">
   <annotation name="org.freedesktop.DBus.Property.EmitsChangedSignal" value="false"/>
  </property>
 </interface>
 <interface name="org.freedesktop.DBus.Properties">
  <method name="Get">
   <arg type="s" name="interface" direction="in"/>
   <arg type="s" name="property" direction="in"/>
   <arg type="v" name="value" direction="out"/>
  </method>
  <method name="GetAll">
   <arg type="s" name="interface" direction="in"/>
   <arg type="a{sv}" name="props" direction="out"/>
  </method>
  <method name="Set">
   <arg type="s" name="interface" direction="in"/>
   <arg type="s" name="property" direction="in"/>
   <arg type="v" name="value" direction="in"/>
  </method>
  <signal name="PropertiesChanged">
   <arg type="s" name="interface"/>
   <arg type="a{sv}" name="changed_properties"/>
   <arg type="as" name="invalidated_properties"/>
  </signal>
 </interface>
` + standardInterfacesXML + `</node>
`

const xmlHeader = `<!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">
`

// standardInterfacesXML: godbus answers Peer on every object, and
// Introspect is ours.
const standardInterfacesXML = ` <interface name="org.freedesktop.DBus.Introspectable">
  <method name="Introspect">
   <arg type="s" name="xml_data" direction="out"/>
  </method>
 </interface>
 <interface name="org.freedesktop.DBus.Peer">
  <method name="Ping"/>
  <method name="GetMachineId">
   <arg type="s" name="machine_uuid" direction="out"/>
  </method>
 </interface>
`

// Sandboxes is what Introspect answers on /org/sandboxd1/sandbox: a
// node whose children are the sandboxes the caller may see, so that
// `busctl tree` finds them.
func Sandboxes(ids []string) string {
	var b strings.Builder
	b.WriteString(xmlHeader + "<node>\n" + standardInterfacesXML)
	for _, id := range ids {
		b.WriteString(` <node name="` + id + `"/>` + "\n") // ids are [A-Za-z0-9_]: nothing to escape
	}
	b.WriteString("</node>\n")
	return b.String()
}
