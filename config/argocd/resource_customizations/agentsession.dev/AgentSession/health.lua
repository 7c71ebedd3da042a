-- Argo CD health of an AgentSession, from its status (the operator's only contract).
-- Phases and conditions: api/agentsession_api/phases.py. Argo CD runs this with gopher-lua (Lua 5.1).
local hs = {}

local function condition(obj, type_)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == type_ then
      return c
    end
  end
  return nil
end

-- "Reason: message" of a condition, or the fallback when the condition is absent.
local function explain(c, fallback)
  if c == nil then
    return fallback
  end
  local text = c.reason or fallback
  if c.message ~= nil and c.message ~= "" then
    text = text .. ": " .. c.message
  end
  return text
end

if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Deleting: the session's claim and sandbox are being removed"
  return hs
end

local status = obj.status
if status == nil or status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the agentsession operator to reconcile the session"
  return hs
end

-- A status written for an older spec says nothing about the current one yet.
if status.observedGeneration ~= nil and obj.metadata ~= nil and obj.metadata.generation ~= nil
    and status.observedGeneration < obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. obj.metadata.generation
  return hs
end

local phase = status.phase
local ready = condition(obj, "Ready")

if phase == "Ready" then
  hs.status = "Healthy"
  hs.message = explain(ready, "Ready")
elseif phase == "Pending" or phase == "Provisioning" then
  hs.status = "Progressing"
  hs.message = phase .. ": " .. explain(ready, "waiting for the sandbox")
elseif phase == "Suspended" then
  hs.status = "Suspended"
  hs.message = explain(ready, "Suspended") .. " (activity or spec.suspend: false resumes it)"
elseif phase == "Failed" then
  hs.status = "Degraded"
  hs.message = "Failed: " .. explain(condition(obj, "Failed") or ready, "the session failed")
elseif phase == "Expired" then
  -- Finished for good (TTL or idle timeout): the session in Git no longer has a sandbox.
  hs.status = "Degraded"
  hs.message = "Expired: " .. explain(condition(obj, "Expired") or ready, "the session ended")
    .. " (delete and recreate it to get a new sandbox)"
elseif phase == "Terminating" then
  hs.status = "Progressing"
  hs.message = "Terminating: " .. explain(ready, "the session's claim is being removed")
else
  hs.status = "Unknown"
  hs.message = "Unknown phase " .. tostring(phase)
end
return hs
